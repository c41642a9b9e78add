-- Chunks of each base (bm25_totals), for the search warnings with bases/health.sql.
-- Parameters: %(base_ids)s int[].
-- Returns: base_id, chunks — a base with no chunk yet has no row.
-- On Citus: the workers of these bases only (one base: a router query on its worker).
SELECT t.base_id, t.chunk_count AS chunks
FROM bm25_totals AS t
WHERE t.base_id = ANY(%(base_ids)s::int[])
