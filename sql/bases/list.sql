-- Bases with their health: documents, chunks, chunks without a vector of the base's model, status.
-- Parameters: %(name)s text (NULL = every base).
-- Returns: base_id, name, kind, spec, status, interrupted, last_indexed_at, chunks_without_vector;
--          watched, caught_up_at; the documents and chunks are counted by bases/counts.sql.
--
-- watched: a `metis watch` (or `metis serve --watch`) gave a sign of life within the last 90
-- seconds (three heartbeats, metis_pg.watch.WATCHED_FOR_S); caught_up_at: when it last finished
-- indexing what changed (migration 0015).
--
-- Status (SPEC F3) and interrupted come from the SQL function base_state (migration 0008), the
-- one rule every reader uses (bases/health.sql, the view metis.base_health_v2): 'indexing' only
-- while a live indexer holds the base's session-level advisory lock; a base whose row still says
-- 'indexing' but whose indexer is gone (a killed process) shows 'waiting' when chunks lack a
-- vector, else 'ready', with interrupted = true: the next `metis index` finishes the job.
-- Reference tables only, never joined to a distributed one: on Citus the statement runs on the
-- coordinator, where base_state sees the indexers' advisory locks (a statement holding one base's
-- shard is sent whole to its worker). The counts (bases/counts.sql) are the workers' business.
SELECT b.base_id, b.name, b.kind, b.spec, st.status, st.interrupted, b.last_indexed_at,
       chunks_without_vector(b.base_id, (b.spec ->> 'embedding_model') || ':' || (b.spec ->> 'embedding_dim'))
         AS chunks_without_vector,
       coalesce(b.watched_at > now() - interval '90 seconds', false) AS watched, b.caught_up_at
FROM bases AS b
CROSS JOIN LATERAL base_state(b.base_id) AS st
WHERE %(name)s::text IS NULL OR b.name = %(name)s::text
ORDER BY b.name
