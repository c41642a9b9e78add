-- A finished indexing run of a base: last_indexed_at is now (SPEC F3).
-- Parameters: %(base_id)s int.
-- A statement of its own, not a CASE in bases/set_status.sql: Citus refuses a function that is
-- not IMMUTABLE (now()) inside a CASE of a write to a reference table.
UPDATE bases
SET last_indexed_at = now()
WHERE base_id = %(base_id)s
