-- Bases with their health: documents, chunks, chunks without a vector of the base's model.
-- Parameters: %(name)s text (NULL = every base).
-- Returns: base_id, name, kind, spec, status, last_indexed_at, documents, chunks, chunks_without_vector.
SELECT b.base_id, b.name, b.kind, b.spec, b.status, b.last_indexed_at,
       (SELECT count(*) FROM documents AS d WHERE d.base_id = b.base_id) AS documents,
       (SELECT count(*) FROM chunks AS c WHERE c.base_id = b.base_id) AS chunks,
       (SELECT count(*) FROM chunks AS c
         WHERE c.base_id = b.base_id
           AND NOT EXISTS (SELECT 1 FROM embeddings AS e
                           WHERE e.chunk_id = c.chunk_id
                             AND e.model = (b.spec ->> 'embedding_model') || ':' || (b.spec ->> 'embedding_dim'))
       ) AS chunks_without_vector
FROM bases AS b
WHERE %(name)s::text IS NULL OR b.name = %(name)s::text
ORDER BY b.name
