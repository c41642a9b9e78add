-- Set a base's status (SPEC F3); a finished run then stamps last_indexed_at (bases/set_indexed_at.sql).
-- Parameters: %(base_id)s int, %(status)s text (ready, indexing or waiting).
UPDATE bases
SET status = %(status)s
WHERE base_id = %(base_id)s
