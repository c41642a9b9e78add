-- Has this replica replayed the primary's WAL up to a position? (read-your-writes)
-- Parameters: %(lsn)s text (a pg_lsn read on the primary).
-- Returns one row: replayed boolean (null when this server is not a standby).
SELECT pg_last_wal_replay_lsn() >= %(lsn)s::pg_lsn AS replayed
