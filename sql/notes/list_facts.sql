-- The facts of a memory base (SPEC F11), in the order they were observed.
-- Parameters: %(base_id)s int, %(holding_only)s bool.
-- Returns: fact_id, text (its chunks joined by blank lines), key, observed_at, holds,
--          superseded_by, superseded_at.
SELECT f.document_id AS fact_id,
       coalesce(string_agg(c.text, E'\n\n' ORDER BY c.ordinal), '') AS text,
       f.key, f.observed_at, f.superseded_by IS NULL AS holds, f.superseded_by, f.superseded_at
FROM facts AS f
LEFT JOIN chunks AS c ON c.base_id = f.base_id AND c.document_id = f.document_id
WHERE f.base_id = %(base_id)s
  AND (NOT %(holding_only)s OR f.superseded_by IS NULL)
-- base_id too: under Citus the tables are keyed (base_id, document_id) (sql/citus/keys.sql).
GROUP BY f.base_id, f.document_id
ORDER BY f.observed_at, f.document_id
