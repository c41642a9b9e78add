-- Set a base's status; a finished run also stamps last_indexed_at (SPEC F3).
-- Parameters: %(base_id)s int, %(status)s text (ready, indexing or waiting),
--             %(indexed)s boolean (true: the run finished now).
UPDATE bases
SET status = %(status)s,
    last_indexed_at = CASE WHEN %(indexed)s::boolean THEN now() ELSE last_indexed_at END
WHERE base_id = %(base_id)s
