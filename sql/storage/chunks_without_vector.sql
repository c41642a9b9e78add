-- Chunks of a base that have no vector of the base's model yet (indexed while the
-- embedding model did not answer, SPEC F14), oldest first; those of one document, or all.
-- A chunk whose text the embedding service refused (vector_notes reason 'refused', migration 0018)
-- for this model, cut to the same %(max_chars)s, is not fetched again: it would be refused again.
-- Another model or another METIS_EMBED_MAX_CHARS sends it again.
-- Parameters: %(base_id)s int, %(model)s text, %(limit)s int,
--             %(document_id)s bigint (NULL: every document of the base),
--             %(after)s bigint: only chunk ids above it (an embedding run goes on past a chunk the
--             model refused instead of fetching it again; 0: from the first),
--             %(max_chars)s int: the characters embedding texts are cut to (NULL: not cut).
-- Returns: chunk_id, document_id, title, headings, text.
SELECT c.chunk_id, c.document_id, c.title, c.headings, c.text
FROM chunks AS c
WHERE c.base_id = %(base_id)s
  AND (%(document_id)s::bigint IS NULL OR c.document_id = %(document_id)s)
  AND c.chunk_id > coalesce(%(after)s::bigint, 0)
  AND NOT EXISTS (
      SELECT 1 FROM embeddings AS e
      WHERE e.base_id = c.base_id AND e.chunk_id = c.chunk_id AND e.model = %(model)s
  )
  AND NOT EXISTS (
      SELECT 1 FROM vector_notes AS n
      WHERE n.base_id = c.base_id AND n.chunk_id = c.chunk_id AND n.model = %(model)s
        AND n.reason = 'refused' AND n.max_chars IS NOT DISTINCT FROM %(max_chars)s::int
  )
ORDER BY c.chunk_id
LIMIT %(limit)s
