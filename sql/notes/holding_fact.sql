-- The fact of a key that holds (not replaced) in a memory base (SPEC F11): at most one.
-- Parameters: %(base_id)s int, %(key)s text.
-- Returns: document_id, observed_at.
SELECT document_id, observed_at
FROM facts
WHERE base_id = %(base_id)s AND key = %(key)s AND superseded_by IS NULL
