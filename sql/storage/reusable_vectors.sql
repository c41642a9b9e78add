-- Vectors of a document's current chunks for one model, keyed by what was embedded,
-- so a changed document re-embeds only the chunks whose text changed (SPEC F3).
-- Parameters: %(document_id)s bigint, %(model)s text.
-- Returns: title, headings, text, embedding.
SELECT c.title, c.headings, c.text, e.embedding
FROM chunks AS c
JOIN embeddings AS e ON e.base_id = c.base_id AND e.chunk_id = c.chunk_id AND e.model = %(model)s
WHERE c.base_id = %(base_id)s AND c.document_id = %(document_id)s
