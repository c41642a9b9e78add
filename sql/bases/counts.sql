-- Documents and chunks of each base, for bases/list.sql.
-- Parameters: %(base_ids)s int[].
-- Returns: base_id, documents, chunks — one row per base given.
-- Counted grouped by base_id, each table filtered by the bases itself: on Citus one base is a
-- router query on its worker (it answers while another worker is down), several are counted by
-- their workers at once.
SELECT x.base_id, coalesce(d.documents, 0) AS documents, coalesce(c.chunks, 0) AS chunks
FROM unnest(%(base_ids)s::int[]) AS x (base_id)
LEFT JOIN (SELECT base_id, count(*) AS documents FROM documents
           WHERE base_id = ANY(%(base_ids)s::int[]) GROUP BY base_id) AS d ON d.base_id = x.base_id
LEFT JOIN (SELECT base_id, count(*) AS chunks FROM chunks
           WHERE base_id = ANY(%(base_ids)s::int[]) GROUP BY base_id) AS c ON c.base_id = x.base_id
