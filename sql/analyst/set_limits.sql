-- The limits of the members of metis_analyst (read at each of their logins by metis_analyst_login()).
-- Parameters: %(max_connections)s int, %(statement_timeout_ms)s int.
INSERT INTO analyst_limits AS l (singleton, max_connections, statement_timeout_ms)
VALUES (true, %(max_connections)s, %(statement_timeout_ms)s)
ON CONFLICT (singleton) DO UPDATE
SET max_connections = excluded.max_connections, statement_timeout_ms = excluded.statement_timeout_ms
