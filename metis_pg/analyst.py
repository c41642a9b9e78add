"""The limits of the analyst role's members (SPEC F20; issue 26): connections and statement time.

The members of ``metis_analyst`` (``GRANT metis_analyst TO alice``) may hold at
most ``METIS_ANALYST_MAX_CONNECTIONS`` connections together, and each of their
sessions starts with ``statement_timeout`` = ``METIS_ANALYST_STATEMENT_TIMEOUT_S``:
both kept by a login event trigger (migration 0014) that reads the table
``analyst_limits``, which :func:`apply_limits` writes. ``metis db upgrade`` and
``metis serve`` apply the current settings after migrating. See docs/sql-views.md.
"""

from __future__ import annotations

import psycopg

from . import sqlfiles
from .config import Settings

__all__ = ["apply_limits"]


def apply_limits(conn: psycopg.Connection, settings: Settings | None = None, *,
                 max_connections: int | None = None, statement_timeout_s: float | None = None) -> None:
    """Write the analyst limits: the arguments given, else `settings`' (default: the environment).

    Takes effect at the members' next logins; sessions already open keep theirs.
    """
    settings = settings or Settings.from_env()
    connections = settings.analyst_max_connections if max_connections is None else max_connections
    seconds = settings.analyst_statement_timeout_s if statement_timeout_s is None else statement_timeout_s
    conn.execute(sqlfiles.load("analyst/set_limits"),
                 {"max_connections": connections, "statement_timeout_ms": round(seconds * 1000)})
