-- What a search must know of its bases to warn (SPEC F14): cheap, read per search.
-- Status from the SQL function base_state (migration 0008), as in bases/list.sql; chunks
-- without a vector are counted only for a base whose status is 'waiting' or 'indexing' (their
-- vectors are being embedded, issue 14).
-- Parameters: %(base_ids)s int[].
-- Returns: base_id, name, status, interrupted (the last run stopped before it finished),
--   last_indexed_at, sources (count), source_names, chunks_without_vector.
-- Reference tables only (bases, sources), never joined to a distributed one: on Citus the statement
-- then runs on the coordinator, where base_state sees the indexers' advisory locks (a statement
-- with one base's shard would be sent whole to its worker). The chunk counts are
-- bases/chunk_counts.sql.
SELECT b.base_id, b.name,
       st.status,
       st.interrupted,
       b.last_indexed_at,
       (SELECT count(*) FROM sources AS s WHERE s.base_id = b.base_id) AS sources,
       (SELECT coalesce(array_agg(s.name ORDER BY s.name), '{}') FROM sources AS s
         WHERE s.base_id = b.base_id) AS source_names,
       CASE WHEN st.status IN ('waiting', 'indexing')
            THEN chunks_without_vector(b.base_id, (b.spec ->> 'embedding_model') || ':' || (b.spec ->> 'embedding_dim'))
            ELSE 0
       END AS chunks_without_vector
FROM bases AS b
CROSS JOIN LATERAL base_state(b.base_id) AS st
WHERE b.base_id = ANY(%(base_ids)s::int[])
