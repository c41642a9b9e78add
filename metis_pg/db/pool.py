"""The pool seam: THE connection pool of metis_pg, and the one place psycopg errors become ours.

:class:`Pool` is the one seam between metis_pg and PostgreSQL, like httpx's
transport error mapping: a statement the server refuses as unsupported (chiefly
Citus, on distributed tables) raises :class:`~metis_pg.errors.DatabaseUnsupported`
with the server's message; every checkout and every statement run inside
``with pool.connection() as conn:`` that fails because the database is down,
restarting, full, read-only, out of connections, or a wait ran out, raises
:class:`~metis_pg.errors.DatabaseUnavailable` naming the cause, within
``Settings.database_wait_s`` (checkout and connect) and
``Settings.statement_timeout_s`` / ``lock_timeout_s`` (set on every pooled
connection). Errors that are the caller's business (a unique violation, a
syntax error) pass through unchanged. An embedded server that died is
restarted by the next checkout (:mod:`.embedded`), which then goes on.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from pgvector.psycopg import register_vector
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

from .. import sqlfiles
from ..config import Settings
from ..errors import DatabaseUnavailable, DatabaseUnsupported
from .embedded import current_uri, embedded_data_folder, embedded_dsn, postmaster_alive, restart_embedded, restart_lock

__all__ = [
    "resolve_dsn", "open_pool", "sqlalchemy_url", "Pool", "unavailable", "cause_of", "connect", "DATABASE_ERRORS",
    "while_gone", "GONE_WAITS",
]

log = logging.getLogger(__name__)

#: What the seam turns into DatabaseUnavailable (anything else is the caller's business).
DATABASE_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,  # connection lost or refused, admin shutdown, disk full (class 53), timeouts
    psycopg.InterfaceError,  # "the connection is closed"
    pg_errors.ReadOnlySqlTransaction,  # a standby, or default_transaction_read_only
)


def resolve_dsn(dsn: str | None, settings: Settings) -> str:
    """Return the DSN to use: `dsn`, else ``settings.database_url``, else the embedded server of
    ``settings.pgdata``."""
    if dsn:
        return dsn
    if settings.database_url:
        return settings.database_url
    return embedded_dsn(settings.pgdata, idle_s=settings.server_idle_s)


def sqlalchemy_url(dsn: str) -> str:
    """Return `dsn` as a SQLAlchemy URL for the psycopg 3 driver."""
    if dsn.startswith("postgresql+psycopg://"):
        return dsn
    for scheme in ("postgresql://", "postgres://"):
        if dsn.startswith(scheme):
            return "postgresql+psycopg://" + dsn[len(scheme):]
    raise DatabaseUnavailable(f"not a PostgreSQL URL: {dsn.split('@')[-1]!r}")


# -- the seam --------------------------------------------------------------------------


def _seconds(value: float) -> str:
    return f"{value:g} s"


#: Server errors whose cause needs no detail of the error, in the words the user reads.
#: What the seam turns into DatabaseUnsupported: a feature the server does not support (0A000), and
#: the internal errors (XX000) Citus raises for what it cannot run (e.g. a distributed query from a
#: function running on a shard, a parallel command after local execution in one transaction).
_UNSUPPORTED: tuple[type[BaseException], ...] = (pg_errors.FeatureNotSupported, pg_errors.InternalError_)

_FIXED_CAUSES: tuple[tuple[type[BaseException], str], ...] = (
    (pg_errors.ReadOnlySqlTransaction, "the database is read-only (a standby, or default_transaction_read_only is on)"),
    (pg_errors.AdminShutdown,
     "the server closed the connection: it is shutting down or an administrator ended the session"),
    (pg_errors.CrashShutdown, "the server closed the connection: it is restarting after a crash"),
    (pg_errors.CannotConnectNow, "the server is starting up or shutting down"),
    (pg_errors.TooManyConnections, "the server has no free connection slot (max_connections)"),
    (pg_errors.OutOfMemory, "the server is out of memory"),
    (pg_errors.DeadlockDetected, "a deadlock with another session"),
    (pg_errors.IdleInTransactionSessionTimeout, "the server closed the connection (idle in transaction too long)"),
)


def cause_of(exc: BaseException, settings: Settings) -> str:
    """Return what a database error means for the user, in a few words (no traceback); `settings`
    gives the wait a timeout is named with."""
    text = str(exc)
    low = text.lower()
    if isinstance(exc, pg_errors.DiskFull) or "no space left on device" in low:
        return "no space left on device (the database server's disk is full)"
    if isinstance(exc, pg_errors.QueryCanceled):
        if "statement timeout" in low:
            return (f"a statement ran longer than {_seconds(settings.statement_timeout_s)}"
                    " (setting statement_timeout_s)")
        return "the statement was canceled"
    if isinstance(exc, pg_errors.LockNotAvailable):
        return (f"a lock held by another session was not granted within {_seconds(settings.lock_timeout_s)}"
                " (setting lock_timeout_s)")
    for error, cause in _FIXED_CAUSES:
        if isinstance(exc, error):
            return cause
    if any(s in low for s in ("server closed the connection", "terminating connection", "connection is closed",
                              "connection is lost", "consuming input failed", "server conn crashed",
                              "eof detected", "connection reset")):
        return "the server closed the connection"
    if "connection refused" in low:
        return "the server refused the connection (is it running?)"
    if "no such file or directory" in low:
        return "the server is not running (its socket is missing)"
    if "timeout expired" in low or "timed out" in low:
        return f"the server did not answer within {_seconds(settings.database_wait_s)}"
    if "could not translate host name" in low or "name or service not known" in low:
        return "unknown host name"
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return re.sub(r"^connection failed: ", "", first)


def unavailable(exc: BaseException, settings: Settings) -> DatabaseUnavailable:
    """Return the DatabaseUnavailable that stands for `exc` (raise it ``from exc``), its
    ``server_gone`` set when `exc` means the server went away (:func:`_gone`)."""
    if isinstance(exc, DatabaseUnavailable):
        return exc
    error = DatabaseUnavailable(f"the database is unavailable: {cause_of(exc, settings)}")
    error.server_gone = _gone(exc)
    return error


#: Server errors that end the session because the server stops or restarts (SQLSTATE 57P01-57P03).
_GONE: tuple[type[BaseException], ...] = (pg_errors.AdminShutdown, pg_errors.CrashShutdown, pg_errors.CannotConnectNow)


def _gone(exc: BaseException | None) -> bool:
    """Whether `exc` means the server went away: it ended the session as it stopped or restarts, or the
    connection was lost, closed or refused (a client-side error, no SQLSTATE); not a full disk, a
    read-only server, a timeout or a lock, which the server answered with."""
    if isinstance(exc, _GONE) or isinstance(exc, psycopg.InterfaceError):
        return True
    return isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None and "timeout expired" not in str(exc)


#: How long :func:`while_gone` waits for a server that went away, in ``Settings.database_wait_s``:
#: 20 s by default (the embedded server's restart after its postmaster was killed took at most 5.5 s,
#: crash recovery included: benchmarks/postmaster_restart.py).
GONE_WAITS = 4


def while_gone(settings: Settings, what: str = "the work") -> Any:
    """Return a tenacity ``Retrying`` that runs a unit of work again while the server is gone.

    For work that may run again whole (one transaction, or a read): it is tried again after a
    :class:`~metis_pg.errors.DatabaseUnavailable` whose ``server_gone`` is set, waiting 0.25 s,
    0.5 s, ... (at most 2 s) between tries, for at most :data:`GONE_WAITS` x
    ``settings.database_wait_s`` seconds; then, and for any other error, the error is raised.
    The next checkout of the pool restarts an embedded server that died (:class:`Pool`). Use as
    ``for attempt in while_gone(settings): with attempt: ...``; `what` names the work in the
    warning logged before each wait.
    """
    import tenacity  # not on a search's path (start-up time)

    def waiting(state: Any) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        log.warning("%s: %s; trying again in %.2g s", what, getattr(error, "message", error),
                    state.next_action.sleep if state.next_action else 0)

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception(lambda e: isinstance(e, DatabaseUnavailable) and e.server_gone),
        stop=tenacity.stop_after_delay(GONE_WAITS * settings.database_wait_s),
        wait=tenacity.wait_exponential(multiplier=0.25, max=2.0),
        before_sleep=waiting, reraise=True)


def unsupported(exc: BaseException) -> DatabaseUnsupported:
    """Return the DatabaseUnsupported that stands for a FeatureNotSupported error (raise it ``from exc``):
    the server's message and its detail, on one line."""
    diag = getattr(exc, "diag", None)
    primary = (getattr(diag, "message_primary", None) or str(exc).strip().splitlines()[0]).strip()
    detail = getattr(diag, "message_detail", None)
    return DatabaseUnsupported(f"the database cannot run this statement: {primary}"
                               + (f" ({detail.strip()})" if detail else ""))


def _connect_timeout(settings: Settings) -> int:
    # libpq takes whole seconds, and treats 1 as 2.
    return max(2, math.ceil(settings.database_wait_s))


def connect(dsn: str, settings: Settings, **kwargs: Any) -> psycopg.Connection:
    """Open a connection of its own (not pooled) within ``settings.database_wait_s``.

    Raises:
        DatabaseUnavailable: no connection (the message names the cause).
    """
    kwargs.setdefault("connect_timeout", _connect_timeout(settings))
    try:
        return psycopg.connect(dsn, **kwargs)
    except DATABASE_ERRORS as exc:
        raise unavailable(exc, settings) from exc


class _RecordingPool(ConnectionPool):
    """A psycopg pool that remembers why its last connection attempt failed."""

    last_error: BaseException | None = None
    last_error_at: float = 0.0

    def _connect(self, timeout: float | None = None):  # psycopg_pool 3.2-3.3 private hook
        try:
            conn = super()._connect(timeout)
        except Exception as exc:
            self.last_error, self.last_error_at = exc, time.monotonic()
            raise
        self.last_error = None
        return conn


class Pool:
    """The connection pool of a :class:`~metis_pg.Metis`: psycopg's pool behind the error seam.

    Use ``with pool.connection() as conn:`` as with psycopg's pool (the block is a
    transaction: committed at its end, rolled back on an exception). Every pooled
    connection has ``statement_timeout`` and ``lock_timeout`` set from the settings
    and pgvector's types registered; each is checked (one empty round trip) when
    it is handed out, so a connection broken by a server restart is replaced.

    Attributes:
        settings: the waits used (:class:`~metis_pg.config.Settings`).
        max_size: connections at most.
    """

    def __init__(self, dsn: str, *, settings: Settings, min_size: int = 1, max_size: int = 8,
                 pgdata: Path | None = None, lazy: bool = False) -> None:
        self.settings = settings
        self.min_size, self.max_size = min_size, max_size
        self._pgdata = pgdata if pgdata is not None else embedded_data_folder(dsn)
        self._closed = False
        #: Seconds a failed checkout keeps this pool failing at once (0: every checkout waits);
        #: a primary with read replicas sets it, so that writes fail at once while reads go on.
        self.fail_fast_s = 0.0
        self._down_until = 0.0
        self._down_cause = ""
        self._pool = self._open(dsn, lazy=lazy)

    # -- psycopg's pool, configured ----------------------------------------------------

    def _open(self, dsn: str, *, lazy: bool = False) -> _RecordingPool:
        """Open psycopg's pool; `lazy`: do not wait for a first connection (it is made in the
        background, a checkout waits for it): a primary that is down does not stop its replicas."""
        wait = self.settings.database_wait_s
        pool = _RecordingPool(
            dsn, min_size=self.min_size, max_size=self.max_size, configure=self._configure, check=self._check,
            open=False, timeout=wait, name="metis",
            # prepare_threshold=None: never prepare. A prepared search statement drifts to a generic
            # plan that cannot fold away the leg a mode switches off or the unused filters: measured
            # 4.5 s instead of 0.14 s for a dense leg at 100k chunks (docs/performance.md).
            kwargs={"autocommit": False, "prepare_threshold": None, "connect_timeout": _connect_timeout(self.settings)},
        )
        try:
            pool.open(wait=not lazy, timeout=max(wait, 1.0))
        except Exception as exc:
            error = pool.last_error or exc
            pool.close(timeout=0)
            raise DatabaseUnavailable(f"could not connect to PostgreSQL: {cause_of(error, self.settings)}") from exc
        return pool

    def _configure(self, conn: psycopg.Connection) -> None:
        s = self.settings
        # Vector types are registered when the extension exists (created by the first migration).
        has_vector = conn.execute(sqlfiles.load("db/configure_connection"), {
            "statement_timeout": f"{round(s.statement_timeout_s * 1000)}ms",
            "lock_timeout": f"{round(s.lock_timeout_s * 1000)}ms",
        }).fetchone()[0]
        if has_vector:
            register_vector(conn)
        conn.commit()

    @staticmethod
    def _check(conn: psycopg.Connection) -> None:
        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            # One broken connection: the server probably restarted and they all are. Replace the
            # idle ones now rather than finding them one by one.
            owner = getattr(conn, "_pool", None)
            if owner is not None:
                owner.drain()
            raise

    # -- the seam ------------------------------------------------------------------------

    @property
    def data_folder(self) -> Path | None:
        """The embedded server's data folder (its disk is the database's), or None for a server of your own."""
        return self._pgdata

    @property
    def conninfo(self) -> str:
        """The DSN connections are opened with (changes when an embedded server is restarted)."""
        return self._pool.conninfo

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection]:
        """Lend a connection for the block, which is one transaction (committed, or rolled back on error).

        Args:
            timeout: seconds to wait for a free connection; None = ``settings.database_wait_s``.

        Raises:
            DatabaseUnavailable: no connection within the wait, or a statement of the block
                failed because the database is down, full, read-only or a timeout ran out.
        """
        conn, pool = self._checkout(timeout)
        try:
            with conn:
                yield conn
        except DATABASE_ERRORS as exc:
            raise unavailable(exc, self.settings) from exc
        except _UNSUPPORTED as exc:  # chiefly Citus: what it cannot plan or run on distributed tables
            raise unsupported(exc) from exc
        finally:
            pool.putconn(conn)

    def down(self) -> str | None:
        """The cause, while a failed checkout keeps this pool failing at once (``fail_fast_s``); else None."""
        return self._down_cause if time.monotonic() < self._down_until else None

    def _checkout(self, timeout: float | None) -> tuple[psycopg.Connection, ConnectionPool]:
        cause = self.down()
        if cause is not None:
            raise DatabaseUnavailable(cause)
        try:
            return self._checkout_waiting(timeout)
        except DatabaseUnavailable as exc:
            # Only when the server could not be reached (a pool busy with slow statements is not down).
            if self.fail_fast_s > 0 and not self._closed and self._pool.last_error is not None:
                self._down_cause, self._down_until = exc.message, time.monotonic() + self.fail_fast_s
            raise

    def _checkout_waiting(self, timeout: float | None) -> tuple[psycopg.Connection, ConnectionPool]:
        wait = self.settings.database_wait_s if timeout is None else timeout
        self._restart_if_dead()
        pool = self._pool
        try:
            return pool.getconn(timeout=wait), pool
        except DATABASE_ERRORS as exc:
            if not self._restart_if_dead(thorough=True):
                raise self._checkout_error(pool, exc, wait) from exc
        pool = self._pool  # the embedded server was restarted: once more, on the new pool
        try:
            return pool.getconn(timeout=wait), pool
        except DATABASE_ERRORS as exc:
            raise self._checkout_error(pool, exc, wait) from exc

    def _checkout_error(self, pool: _RecordingPool, exc: BaseException, wait: float) -> DatabaseUnavailable:
        if self._closed:
            return DatabaseUnavailable("the database is unavailable: this connection pool is closed")
        if isinstance(exc, PoolTimeout):
            recent = pool.last_error is not None and time.monotonic() - pool.last_error_at < wait + 30
            if recent:
                why = cause_of(pool.last_error, self.settings)
            else:
                why = (f"all {self.max_size} connections of this process are in use"
                       " (too many requests at once, or a slow statement)")
            error = DatabaseUnavailable(f"the database is unavailable: no connection within {_seconds(wait)}: {why}")
            error.server_gone = recent and _gone(pool.last_error)
            return error
        return unavailable(exc, self.settings)

    def _restart_if_dead(self, *, thorough: bool = False) -> bool:
        """Restart the embedded server if its postmaster died; True when it did (a new pool is in place).

        Before each checkout the quick check runs; after a failed checkout the thorough one.
        """
        if self._pgdata is None or self._closed or postmaster_alive(self._pgdata, thorough=thorough):
            return False
        with restart_lock:
            if (postmaster_alive(self._pgdata, thorough=True)
                    and self._pool.conninfo == current_uri(self._pgdata)):
                return True  # another thread restarted it meanwhile
            log.warning("the embedded PostgreSQL in %s has stopped: restarting it", self._pgdata)
            uri = restart_embedded(self._pgdata)
            old, self._pool = self._pool, self._open(uri)
            # Its workers may be asleep between two connection attempts: close it in the background.
            threading.Thread(target=old.close, kwargs={"timeout": 10}, name="metis-old-pool", daemon=True).start()
            log.warning("the embedded PostgreSQL in %s runs again", self._pgdata)
            return True

    # -- the rest of psycopg's pool --------------------------------------------------------

    def close(self, timeout: float = 5.0) -> None:
        """Close every connection (waiting up to `timeout` s for those lent out)."""
        self._closed = True
        self._pool.close(timeout=timeout)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def get_stats(self) -> dict[str, int]:
        """psycopg's pool statistics (``pool_size``, ``pool_available``, ``requests_waiting``, ...)."""
        return self._pool.get_stats()

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_pool(dsn: str, *, settings: Settings, min_size: int = 1, max_size: int = 8) -> Pool:
    """Open the :class:`Pool` on `dsn` with pgvector types registered and the waits of `settings`.

    Raises:
        DatabaseUnavailable: no connection within ``settings.database_wait_s`` (the cause named).
    """
    return Pool(dsn, min_size=min_size, max_size=max_size, settings=settings)

