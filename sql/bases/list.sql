-- Bases with their health: documents, chunks, chunks without a vector of the base's model, status.
-- Parameters: %(name)s text (NULL = every base).
-- Returns: base_id, name, kind, spec, status, interrupted, last_indexed_at, documents, chunks,
--          chunks_without_vector.
--
-- Status (SPEC F3) and interrupted come from the SQL function base_state (migration 0008), the
-- one rule every reader uses (bases/health.sql, the view metis.base_health_v2): 'indexing' only
-- while a live indexer holds the base's session-level advisory lock; a base whose row still says
-- 'indexing' but whose indexer is gone (a killed process) shows 'waiting' when chunks lack a
-- vector, else 'ready', with interrupted = true: the next `metis index` finishes the job.
-- The counts are grouped by base_id and joined, not correlated subqueries per base row: Citus
-- refuses those under a LATERAL over the reference table bases; grouped by the distribution
-- column, each worker counts its bases (docs/scaling.md).
SELECT b.base_id, b.name, b.kind, b.spec, st.status, st.interrupted,
       b.last_indexed_at, coalesce(dc.documents, 0) AS documents, coalesce(cc.chunks, 0) AS chunks,
       chunks_without_vector(b.base_id, (b.spec ->> 'embedding_model') || ':' || (b.spec ->> 'embedding_dim'))
         AS chunks_without_vector
FROM bases AS b
CROSS JOIN LATERAL base_state(b.base_id) AS st
LEFT JOIN (SELECT d.base_id, count(*) AS documents FROM documents AS d
           WHERE %(name)s::text IS NULL OR d.base_id = (SELECT base_id FROM bases WHERE name = %(name)s::text)
           GROUP BY d.base_id) AS dc ON dc.base_id = b.base_id
LEFT JOIN (SELECT c.base_id, count(*) AS chunks FROM chunks AS c
           WHERE %(name)s::text IS NULL OR c.base_id = (SELECT base_id FROM bases WHERE name = %(name)s::text)
           GROUP BY c.base_id) AS cc ON cc.base_id = b.base_id
WHERE %(name)s::text IS NULL OR b.name = %(name)s::text
ORDER BY b.name
