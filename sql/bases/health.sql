-- What a search must know of its bases to warn (SPEC F14): cheap, read per search.
-- Chunks without a vector are counted only for a base that is waiting.
-- Parameters: %(base_ids)s int[].
-- Returns: name, status, last_indexed_at, chunks, sources, chunks_without_vector.
SELECT b.name, b.status, b.last_indexed_at,
       coalesce(t.chunk_count, 0) AS chunks,
       (SELECT count(*) FROM sources AS s WHERE s.base_id = b.base_id) AS sources,
       CASE WHEN b.status = 'waiting' THEN (
           SELECT count(*) FROM chunks AS c
           WHERE c.base_id = b.base_id
             AND NOT EXISTS (SELECT 1 FROM embeddings AS e
                             WHERE e.chunk_id = c.chunk_id
                               AND e.model = (b.spec ->> 'embedding_model') || ':' || (b.spec ->> 'embedding_dim'))
       ) ELSE 0 END AS chunks_without_vector
FROM bases AS b
LEFT JOIN bm25_totals AS t ON t.base_id = b.base_id
WHERE b.base_id = ANY(%(base_ids)s::int[])
