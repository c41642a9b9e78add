"""analyst limits: a connection limit and a statement_timeout for the members of metis_analyst

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01

The analyst role could open 94 of the server's 100 connections and run
``pg_sleep`` without end (issue 26): metis kept working only because it
connects as a superuser on the embedded server. A group role's ``CONNECTION
LIMIT`` and ``ALTER ROLE ... SET`` do not apply to its members' logins, so:

- ``analyst_limits`` (one row): ``max_connections`` the members of
  ``metis_analyst`` may hold together, and the ``statement_timeout_ms`` each of
  their sessions starts with. Written here with the defaults of
  ``METIS_ANALYST_MAX_CONNECTIONS`` (10) and ``METIS_ANALYST_STATEMENT_TIMEOUT_S``
  (60), then with the settings in use by every ``metis db upgrade`` / ``metis
  serve`` (:func:`metis_pg.analyst.apply_limits`).
- ``metis_analyst_login()`` (``sql/analyst/login_limits.v1.sql``) and the login
  event trigger ``metis_analyst_login`` on this database: each member's login
  gets the timeout, and one more than the limit is refused (SQLSTATE 53300).
  Creating an event trigger needs a superuser: otherwise a WARNING says so and
  the operator runs this revision as one (docs/sql-views.md).
- Connections kept for the service: when the migrating role is not a superuser,
  it is granted ``pg_use_reserved_connections`` if it may be (PostgreSQL 16+;
  the operator sets ``reserved_connections`` on the server); a superuser has
  ``superuser_reserved_connections`` already.

Downgrade drops the trigger, the function and the table.
"""

from collections.abc import Sequence

from alembic import op

from metis_pg import sqlfiles
from metis_pg.config import Settings

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE analyst_limits (
            singleton             boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            max_connections       integer NOT NULL CHECK (max_connections >= 0),
            statement_timeout_ms  integer NOT NULL CHECK (statement_timeout_ms >= 0)
        )
        """
    )
    op.execute("COMMENT ON TABLE analyst_limits IS 'Limits of the members of metis_analyst, read at each of "
               "their logins (METIS_ANALYST_MAX_CONNECTIONS, METIS_ANALYST_STATEMENT_TIMEOUT_S)'")
    # The settings' defaults; metis_pg.migrate.upgrade then writes the values of the settings in use.
    defaults = Settings.model_fields
    op.get_bind().exec_driver_sql(
        sqlfiles.load("analyst/set_limits"),
        {"max_connections": defaults["analyst_max_connections"].default,
         "statement_timeout_ms": round(defaults["analyst_statement_timeout_s"].default * 1000)},
    )
    op.execute(sqlfiles.load("analyst/login_limits.v1"))
    op.execute("REVOKE ALL ON FUNCTION metis_analyst_login() FROM PUBLIC")
    op.execute(
        """
        DO $body$
        BEGIN
            IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
                CREATE EVENT TRIGGER metis_analyst_login ON login EXECUTE FUNCTION metis_analyst_login();
            ELSE
                RAISE WARNING 'the analyst limits are not enforced: % may not create the login event trigger', current_user
                    USING HINT = 'run metis db upgrade once as a superuser (docs/sql-views.md)';
                BEGIN
                    EXECUTE format('GRANT pg_use_reserved_connections TO %I', current_user);
                EXCEPTION WHEN insufficient_privilege OR undefined_object THEN
                    RAISE WARNING 'no connections are reserved for %: grant it pg_use_reserved_connections', current_user;
                END;
            END IF;
        END
        $body$
        """
    )


def downgrade() -> None:
    op.execute("DROP EVENT TRIGGER IF EXISTS metis_analyst_login")
    op.execute("DROP FUNCTION IF EXISTS metis_analyst_login()")
    op.execute("DROP TABLE IF EXISTS analyst_limits")
