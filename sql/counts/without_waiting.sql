-- For the rest of this transaction (a search count): wait at most 10 ms for a row lock, and do not
-- wait for the commit's WAL flush (a count lost in a crash is acceptable; a search kept waiting is not).
SELECT set_config('lock_timeout', '10ms', true), set_config('synchronous_commit', 'off', true)
