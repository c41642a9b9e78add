"""Alembic migrations, run in-process on the package's ``migrations/`` folder.

``metis db upgrade``, ``metis serve`` and ``metis demo`` call :func:`upgrade`; the app
never creates tables itself (SPEC architecture). Every other command and
:func:`metis_pg.connect` only read the stored revision (:func:`check_revision`, one
query, no Alembic import): a database behind the code raises
:class:`~metis_pg.errors.SchemaOutOfDate` naming the command to run, and a database
with no metis schema at all (a new one) is created.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from typing import TYPE_CHECKING

import psycopg

from .config import Settings
from .db import DATABASE_ERRORS, cause_of, sqlalchemy_url
from .errors import DatabaseUnavailable, SchemaOutOfDate

if TYPE_CHECKING:  # pragma: no cover
    from alembic.config import Config

__all__ = ["SCHEMA_REVISION", "upgrade", "downgrade", "current_revision", "head_revision", "is_at_head",
           "check_revision"]

#: The revision this code is written for: Alembic's head (tests/test_migrations.py checks it).
SCHEMA_REVISION = "0025"


def _migrations_dir() -> Path:
    # Installed wheel: metis_pg/migrations (force-included); checkout: <root>/migrations.
    packaged = Path(str(resources.files("metis_pg"))) / "migrations"
    if (packaged / "env.py").exists():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / "migrations"
    if (checkout / "env.py").exists():
        return checkout
    raise DatabaseUnavailable("the Alembic migrations folder of metis_pg is missing from this installation")


def _config(dsn: str) -> "Config":
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", sqlalchemy_url(dsn).replace("%", "%%"))
    return cfg


def _engine(dsn: str, settings: Settings):
    """An engine whose connections connect within ``database_wait_s`` and wait for a lock at most
    ``lock_timeout_s``: a migration waiting for ACCESS EXCLUSIVE would queue every later search."""
    from sqlalchemy import create_engine, event

    engine = create_engine(sqlalchemy_url(dsn), poolclass=None,
                           connect_args={"connect_timeout": max(2, round(settings.database_wait_s))})

    @event.listens_for(engine, "connect")
    def _bounded_waits(dbapi_connection, _record) -> None:
        with dbapi_connection.cursor() as cur:
            cur.execute("SELECT set_config('lock_timeout', %s, false)", (f"{round(settings.lock_timeout_s * 1000)}ms",))
        dbapi_connection.commit()

    return engine


#: How the message of a migration that never reached the server starts (:func:`unreachable`).
_UNREACHABLE = "could not connect to PostgreSQL"


def unreachable(exc: DatabaseUnavailable) -> bool:
    """Whether `exc`, from :func:`upgrade`, says the server could not be reached (no migration ran),
    rather than that a migration failed."""
    return exc.message.startswith(_UNREACHABLE)


def _run(dsn: str, action, settings: Settings) -> None:
    cfg = _config(dsn)
    engine = _engine(dsn, settings)
    try:
        try:
            connection = engine.connect()
        except Exception as exc:  # in the user's terms: the search never got to a migration
            orig = getattr(exc, "orig", None) or exc
            raise DatabaseUnavailable(f"{_UNREACHABLE}: {cause_of(orig, settings)}") from exc
        try:
            with connection, connection.begin():
                cfg.attributes["connection"] = connection
                action(cfg)
        except Exception as exc:
            orig = getattr(exc, "orig", None) or exc
            why = cause_of(orig, settings) if isinstance(orig, DATABASE_ERRORS) else str(exc)
            raise DatabaseUnavailable(f"migration failed: {why}") from exc
    finally:
        engine.dispose()


def upgrade(dsn: str, revision: str = "head", *, settings: Settings) -> None:
    """Upgrade the database at `dsn` to `revision` (default: the newest).

    `settings` gives the waits and the analyst limits written at head.

    Raises:
        DatabaseUnavailable: the database cannot be reached or a migration failed.
    """
    from alembic import command

    _run(dsn, lambda cfg: command.upgrade(cfg, revision), settings)
    if revision == "head":
        _apply_analyst_limits(dsn, settings)


def _apply_analyst_limits(dsn: str, settings: Settings) -> None:
    """Write the analyst limits of the current settings (they may have changed since the migration)."""
    from . import analyst
    from .db import connect, unavailable

    with connect(dsn, settings) as conn:
        try:
            analyst.apply_limits(conn, settings)
            conn.commit()
        except DATABASE_ERRORS as exc:
            raise unavailable(exc, settings) from exc


def downgrade(dsn: str, revision: str, *, settings: Settings) -> None:
    """Downgrade the database at `dsn` to `revision` (``"base"`` drops everything)."""
    from alembic import command

    _run(dsn, lambda cfg: command.downgrade(cfg, revision), settings)


def head_revision() -> str:
    """Return the newest revision id shipped with this package."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config("postgresql://x")).get_current_head()


def current_revision(dsn: str, *, settings: Settings) -> str | None:
    """Return the revision the database at `dsn` is at (None: never migrated).

    Raises:
        DatabaseUnavailable: the database cannot be reached.
    """
    from alembic.runtime.migration import MigrationContext

    engine = _engine(dsn, settings)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    except Exception as exc:
        orig = getattr(exc, "orig", None) or exc
        if isinstance(orig, DATABASE_ERRORS):
            raise DatabaseUnavailable(f"{_UNREACHABLE}: {cause_of(orig, settings)}") from exc
        raise
    finally:
        engine.dispose()


def is_at_head(dsn: str, *, settings: Settings) -> bool:
    """True when the database at `dsn` is at the newest revision."""
    return current_revision(dsn, settings=settings) == head_revision()


def stored_revision(conn: psycopg.Connection) -> str | None:
    """Return the revision stored in the database (None: no metis schema there yet)."""
    try:
        with conn.transaction():
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except psycopg.errors.UndefinedTable:
        return None
    return row[0] if row else None


def check_revision(conn: psycopg.Connection, dsn: str, *, settings: Settings) -> bool:
    """Make sure the schema is the one this code is written for, without running Alembic if it is.

    A database with no metis schema (new) is created with :func:`upgrade`; then True
    is returned (connections opened before it lack the pgvector types: open new ones).

    Raises:
        SchemaOutOfDate: the schema is at another revision than :data:`SCHEMA_REVISION`
            (older: run ``metis db upgrade``; newer: upgrade metis_pg).
        DatabaseUnavailable: creating the schema failed.
    """
    revision = stored_revision(conn)
    conn.commit()
    if revision == SCHEMA_REVISION:
        return False
    if revision is None:
        upgrade(dsn, settings=settings)
        return True
    if revision < SCHEMA_REVISION:
        raise SchemaOutOfDate(
            f"the database schema is at revision {revision}, this metis_pg needs {SCHEMA_REVISION}: "
            f"run `metis db upgrade` (Alembic migrations; back up first)"
        )
    raise SchemaOutOfDate(
        f"the database schema is at revision {revision}, newer than this metis_pg knows ({SCHEMA_REVISION}): "
        f"upgrade metis_pg"
    )
