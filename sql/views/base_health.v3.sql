-- View metis.base_health_v3, version 3 of base_health (SPEC F3, F20): one row per base with what is
-- indexed and its live status. Created by migration 0013; released view files are never edited.
-- The columns and rows of version 2 (metis.base_health_v2), counted by base_id and joined (not
-- correlated subqueries per base row, which Citus refuses under the LATERAL over the reference
-- table bases: "complex joins are only supported when all distributed tables are co-located and
-- joined on their distribution columns"), chunks matched to their vectors on base_id too.
-- Returns: base, kind, status, interrupted, documents, chunks, chunks_without_vector,
--          embedding_model, last_indexed_at.
SELECT b.name AS base,
       b.kind AS kind,
       st.status AS status,
       st.interrupted AS interrupted,
       coalesce(dc.documents, 0) AS documents,
       coalesce(cc.chunks, 0) AS chunks,
       coalesce(cc.chunks_without_vector, 0) AS chunks_without_vector,
       (b.spec ->> 'embedding_model') || ':' || (b.spec ->> 'embedding_dim') AS embedding_model,
       b.last_indexed_at AS last_indexed_at
FROM bases AS b
CROSS JOIN LATERAL base_state(b.base_id) AS st
LEFT JOIN (SELECT d.base_id, count(*) AS documents FROM documents AS d GROUP BY d.base_id) AS dc
       ON dc.base_id = b.base_id
LEFT JOIN (SELECT c.base_id, count(*) AS chunks,
                  count(*) FILTER (WHERE NOT EXISTS (
                      SELECT 1 FROM embeddings AS e
                      WHERE e.base_id = c.base_id AND e.chunk_id = c.chunk_id
                        AND e.model = (SELECT (x.spec ->> 'embedding_model') || ':' || (x.spec ->> 'embedding_dim')
                                       FROM bases AS x WHERE x.base_id = c.base_id))) AS chunks_without_vector
           FROM chunks AS c GROUP BY c.base_id) AS cc
       ON cc.base_id = b.base_id
