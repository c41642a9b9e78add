"""Alembic migrations, run in-process on the package's ``migrations/`` folder.

``metis db upgrade`` and :func:`metis_pg.connect` call :func:`upgrade`; the app
never creates tables itself (SPEC architecture).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, event

from .config import Settings
from .db import DATABASE_ERRORS, cause_of, sqlalchemy_url
from .errors import DatabaseUnavailable

__all__ = ["upgrade", "downgrade", "current_revision", "head_revision", "is_at_head"]


def _migrations_dir() -> Path:
    # Installed wheel: metis_pg/migrations (force-included); checkout: <root>/migrations.
    packaged = Path(str(resources.files("metis_pg"))) / "migrations"
    if (packaged / "env.py").exists():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / "migrations"
    if (checkout / "env.py").exists():
        return checkout
    raise DatabaseUnavailable("the Alembic migrations folder of metis_pg is missing from this installation")


def _config(dsn: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", sqlalchemy_url(dsn).replace("%", "%%"))
    return cfg


def _engine(dsn: str, settings: Settings):
    """An engine whose connections connect within ``database_wait_s`` and wait for a lock at most
    ``lock_timeout_s``: a migration waiting for ACCESS EXCLUSIVE would queue every later search."""
    engine = create_engine(sqlalchemy_url(dsn), poolclass=None,
                           connect_args={"connect_timeout": max(2, round(settings.database_wait_s))})

    @event.listens_for(engine, "connect")
    def _bounded_waits(dbapi_connection, _record) -> None:
        with dbapi_connection.cursor() as cur:
            cur.execute("SELECT set_config('lock_timeout', %s, false)", (f"{round(settings.lock_timeout_s * 1000)}ms",))
        dbapi_connection.commit()

    return engine


def _run(dsn: str, action) -> None:
    cfg = _config(dsn)
    settings = Settings.from_env()
    engine = _engine(dsn, settings)
    try:
        try:
            connection = engine.connect()
        except Exception as exc:  # in the user's terms: the search never got to a migration
            orig = getattr(exc, "orig", None) or exc
            raise DatabaseUnavailable(f"could not connect to PostgreSQL: {cause_of(orig, settings)}") from exc
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


def upgrade(dsn: str, revision: str = "head") -> None:
    """Upgrade the database at `dsn` to `revision` (default: the newest).

    Raises:
        DatabaseUnavailable: the database cannot be reached or a migration failed.
    """
    _run(dsn, lambda cfg: command.upgrade(cfg, revision))


def downgrade(dsn: str, revision: str) -> None:
    """Downgrade the database at `dsn` to `revision` (``"base"`` drops everything)."""
    _run(dsn, lambda cfg: command.downgrade(cfg, revision))


def head_revision() -> str:
    """Return the newest revision id shipped with this package."""
    return ScriptDirectory.from_config(_config("postgresql://x")).get_current_head()


def current_revision(dsn: str) -> str | None:
    """Return the revision the database at `dsn` is at (None: never migrated).

    Raises:
        DatabaseUnavailable: the database cannot be reached.
    """
    settings = Settings.from_env()
    engine = _engine(dsn, settings)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    except Exception as exc:
        orig = getattr(exc, "orig", None) or exc
        if isinstance(orig, DATABASE_ERRORS):
            raise DatabaseUnavailable(f"could not connect to PostgreSQL: {cause_of(orig, settings)}") from exc
        raise
    finally:
        engine.dispose()


def is_at_head(dsn: str) -> bool:
    """True when the database at `dsn` is at the newest revision."""
    return current_revision(dsn) == head_revision()
