-- The analyst watchdog (metis_pg.analyst.AnalystWatchdog): cancel every statement of a member of
-- metis_analyst that has run longer than analyst_limits.statement_timeout_ms, and end the session
-- of one still running %(terminate_after_s)s seconds past that (a statement that ignores the cancel).
-- A member may SET statement_timeout = 0 in its session; it cannot stop this, which runs from the
-- service's own (privileged: superuser or pg_signal_backend) connection.
-- Superusers, the role running this and other backends (autovacuum, WAL senders) are never touched.
-- Parameters: %(terminate_after_s)s float.
-- Returns: pid, usename, seconds (how long the statement ran), action ('cancel' or 'terminate'),
--          signalled (what pg_cancel_backend / pg_terminate_backend answered).
WITH overlong AS (
    SELECT a.pid, a.usename::text AS usename,
           extract(epoch FROM clock_timestamp() - a.query_start)::float8 AS seconds,
           l.statement_timeout_ms / 1000.0 AS limit_s
    FROM pg_catalog.pg_stat_activity AS a
    JOIN pg_catalog.pg_roles AS r ON r.oid = a.usesysid
    CROSS JOIN analyst_limits AS l
    WHERE l.statement_timeout_ms > 0
      AND a.backend_type = 'client backend'
      AND a.state IN ('active', 'fastpath function call')
      AND a.pid <> pg_catalog.pg_backend_pid()
      AND a.usesysid <> (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = current_user)
      AND NOT r.rolsuper
      AND pg_catalog.pg_has_role(a.usesysid, 'metis_analyst', 'MEMBER')
      AND a.query_start < clock_timestamp() - make_interval(secs => l.statement_timeout_ms / 1000.0)
)
SELECT o.pid, o.usename, o.seconds,
       CASE WHEN o.seconds > o.limit_s + %(terminate_after_s)s THEN 'terminate' ELSE 'cancel' END AS action,
       CASE WHEN o.seconds > o.limit_s + %(terminate_after_s)s THEN pg_catalog.pg_terminate_backend(o.pid)
            ELSE pg_catalog.pg_cancel_backend(o.pid) END AS signalled
FROM overlong AS o
ORDER BY o.pid
