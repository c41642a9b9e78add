-- View metis.base_health, version 1 (SPEC F20): one row per base with what is indexed.
-- Created by migration 0003; released view files are never edited.
-- Returns: base, kind, status, documents, chunks, chunks_without_vector, embedding_model,
--          last_indexed_at.
-- embedding_model is the base's embedding fingerprint (model name and dimension), the value
-- embeddings.model holds; a chunk "without vector" has no embedding of that fingerprint.
SELECT b.name AS base,
       b.kind AS kind,
       b.status AS status,
       (SELECT count(*) FROM documents AS d WHERE d.base_id = b.base_id) AS documents,
       (SELECT count(*) FROM chunks AS c WHERE c.base_id = b.base_id) AS chunks,
       (SELECT count(*) FROM chunks AS c
         WHERE c.base_id = b.base_id
           AND NOT EXISTS (SELECT 1 FROM embeddings AS e
                           WHERE e.chunk_id = c.chunk_id
                             AND e.model = (b.spec ->> 'embedding_model') || ':' || (b.spec ->> 'embedding_dim'))
       ) AS chunks_without_vector,
       (b.spec ->> 'embedding_model') || ':' || (b.spec ->> 'embedding_dim') AS embedding_model,
       b.last_indexed_at AS last_indexed_at
FROM bases AS b
