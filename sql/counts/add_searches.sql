-- Add search counts (SPEC F20) for many (base, day, mode) at once: the searches just answered and
-- those counted while their rows were busy. Only counts are kept: the question is never stored.
-- Parameters (one array entry per row, sorted by base_id, day, mode: concurrent writers lock rows in one order):
--   %(base_ids)s int[], %(days)s date[] (UTC days), %(modes)s text[], %(searches)s int[].
INSERT INTO search_counts AS n (base_id, day, mode, searches)
SELECT c.base_id, c.day, c.mode, c.searches
FROM unnest(%(base_ids)s::int[], %(days)s::date[], %(modes)s::text[], %(searches)s::int[])
     AS c (base_id, day, mode, searches)
-- A base dropped since its searches: its counts went with it.
WHERE EXISTS (SELECT 1 FROM bases b WHERE b.base_id = c.base_id)
ORDER BY c.base_id, c.day, c.mode
ON CONFLICT (base_id, day, mode) DO UPDATE SET searches = n.searches + excluded.searches
