"""Database access: a DSN or the embedded server, THE connection pool, pgvector.

- :mod:`.embedded`: the embedded PostgreSQL (SPEC F21) of a data folder: started, shared by
  the processes using it, restarted when it died, stopped by the last one.
- :mod:`.pool`: :class:`Pool`, the one seam between metis_pg and PostgreSQL: every database
  failure leaves it as :class:`~metis_pg.errors.DatabaseUnavailable` naming the cause.
- :mod:`.standby`: a local streaming standby of a primary (read replicas).
- :mod:`.kernel`: metis_pg's own cosine kernel, built and created on the embedded server.

Internal to metis_pg; the operator's tools and tests use the names below.
"""

from .embedded import (
    embedded_dsn,
    prepare_pgserver_import,
    server_settings,
    start_failure_cause,
    stop_embedded,
    write_server_settings,
)
from .pool import (
    DATABASE_ERRORS,
    Pool,
    cause_of,
    connect,
    open_pool,
    resolve_dsn,
    sqlalchemy_url,
    unavailable,
    while_gone,
)

__all__ = ["resolve_dsn", "open_pool", "embedded_dsn", "sqlalchemy_url", "Pool", "unavailable", "cause_of", "connect",
           "DATABASE_ERRORS", "stop_embedded", "server_settings", "write_server_settings", "start_failure_cause",
           "prepare_pgserver_import", "while_gone"]
