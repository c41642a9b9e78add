-- The primary's current WAL position: what a replica must have replayed to show every
-- transaction committed so far (read-your-writes, and the replicas' lag).
-- No parameters. Returns one row: lsn (pg_lsn, as text).
SELECT pg_current_wal_lsn()::text AS lsn
