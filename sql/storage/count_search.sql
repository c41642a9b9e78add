-- Count one search for each of its bases, for today (UTC) and its mode (SPEC F20).
-- Only the count is kept: the question is never stored.
-- Parameters: %(base_ids)s int[] (sorted, so concurrent searches lock rows in one order),
--             %(mode)s text (hybrid, dense or keyword).
INSERT INTO search_counts AS n (base_id, day, mode, searches)
SELECT ids.base_id, (now() AT TIME ZONE 'UTC')::date, %(mode)s, 1
FROM unnest(%(base_ids)s::int[]) AS ids (base_id)
ORDER BY ids.base_id
ON CONFLICT (base_id, day, mode) DO UPDATE SET searches = n.searches + 1
