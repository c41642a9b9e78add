-- Set a pooled connection's waits, and say whether pgvector's types exist yet (created by the
-- first migration): the pool registers them then.
-- Parameters: %(statement_timeout)s text (e.g. '30000ms'), %(lock_timeout)s text.
-- Returns: has_vector.
SELECT EXISTS (SELECT 1 FROM pg_type WHERE typname = 'halfvec') AS has_vector,
       set_config('statement_timeout', %(statement_timeout)s, false) AS statement_timeout,
       set_config('lock_timeout', %(lock_timeout)s, false) AS lock_timeout
