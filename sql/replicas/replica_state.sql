-- A replica's replay position against the primary's (measured just before, on the primary).
-- Parameters: %(primary_lsn)s text (a pg_lsn).
-- Returns one row:
--   in_recovery   boolean  false: not a standby (promoted, or not a replica at all)
--   replay_lsn    text     the last WAL position replayed (null when not a standby)
--   behind_bytes  numeric  WAL bytes the replica has still to replay (<= 0: caught up)
--   replay_age_s  float8   seconds since the last replayed transaction committed on the primary
--                          (an upper bound of the lag while behind_bytes > 0; null: none replayed yet)
SELECT pg_is_in_recovery() AS in_recovery,
       pg_last_wal_replay_lsn()::text AS replay_lsn,
       pg_wal_lsn_diff(%(primary_lsn)s::pg_lsn, pg_last_wal_replay_lsn()) AS behind_bytes,
       extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp())::float8 AS replay_age_s
