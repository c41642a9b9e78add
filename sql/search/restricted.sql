-- Whether a search of these bases runs on behalf of principals (metis_pg.access set
-- metis.principals in this transaction) in a base where some documents may have readers: the
-- keyword leg then drops the chunks of the documents they may not read (hybrid.sql's hidden CTE).
-- Parameters: %(base_ids)s int[]. Returns: restricted boolean.
SELECT coalesce(current_setting('metis.principals', true), '') <> ''
       AND EXISTS (SELECT 1 FROM sources AS s
                   WHERE s.base_id = ANY(%(base_ids)s::int[]) AND (s.readers <> '{}' OR s.front_matter_readers))
       AS restricted
