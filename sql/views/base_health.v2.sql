-- View metis.base_health_v2, version 2 of base_health (SPEC F3, F20): one row per base with
-- what is indexed and its LIVE status. Created by migration 0008; released view files are
-- never edited. Version 1 (metis.base_health) shows the status stored in the row, which a
-- killed indexer leaves at 'indexing'; here status and interrupted come from the SQL function
-- base_state (migration 0008), the one rule every reader uses (`metis status`, the API, the
-- search warnings, this view).
-- Returns: base, kind, status, interrupted, documents, chunks, chunks_without_vector,
--          embedding_model, last_indexed_at.
SELECT b.name AS base,
       b.kind AS kind,
       st.status AS status,
       st.interrupted AS interrupted,
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
CROSS JOIN LATERAL base_state(b.base_id) AS st
