-- The facts row of a fact's document (SPEC F11); superseded_by / superseded_at are set for a fact
-- observed before the one that holds its key (it never held).
-- Parameters: %(document_id)s bigint, %(base_id)s int, %(key)s text (NULL: no key),
--             %(observed_at)s timestamptz, %(superseded_by)s bigint, %(superseded_at)s timestamptz.
INSERT INTO facts (document_id, base_id, key, observed_at, superseded_by, superseded_at)
VALUES (%(document_id)s, %(base_id)s, %(key)s, %(observed_at)s, %(superseded_by)s, %(superseded_at)s)
