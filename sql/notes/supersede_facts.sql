-- Mark facts as replaced by a new one, as of the new fact's observed_at (SPEC F11).
-- Parameters: %(base_id)s int, %(replaced)s bigint[] (the facts replaced),
--             %(document_id)s bigint (the new fact), %(observed_at)s timestamptz.
UPDATE facts
SET superseded_by = %(document_id)s, superseded_at = %(observed_at)s
WHERE base_id = %(base_id)s AND document_id = ANY(%(replaced)s::bigint[])
