"""Stop the embedded PostgreSQL once it has been idle for ``METIS_SERVER_IDLE_S`` seconds.

A process that starts or joins an embedded server starts this as a program of its own when none
runs for that data folder (``Settings.server_idle_s`` > 0; from the start, so that a server whose
users were all killed stops too), and the last user to exit starts it again if it is gone. The
server then stays up after its last user, so that the next command joins it instead of starting
it (~0.1 s each, issue 25 item 6), and this stops it when no process has joined or left it for
that long. "Joined or left" is the modification time of pgserver's list of the server's users
(``.handle_pids.json``, written at each join and exit); a listed process that no longer runs
(killed) does not count as a user.

One watcher per data folder (its pid in ``.idle_stop.pid``): it waits as long as processes use
the server, then until the idle time has passed, checks and stops under pgserver's lock (the
lock a process takes to start or join the server), and exits when the server is gone, whoever
stopped it (``metis db stop``).

Run as a script (``python -I idle_stop.py PGDATA IDLE_S LOCK_FILE``), not as part of the package:
it imports only the standard library and fasteners (pgserver's lock), so it costs little CPU
beside the command that started it. :func:`stop_postmaster` is also how the embedded server is
stopped at a process's exit (:mod:`.embedded`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

#: How often a stop looks at the postmaster's lock file (seconds): pg_ctl -w looks ten times a
#: second, so a stop of ~25 ms took ~105 ms.
LOCK_FILE_POLL_S = 0.003
#: As long as pg_ctl -w waits by default (PGCTLTIMEOUT).
PG_CTL_WAIT_S = 60.0
WATCHER_FILE = ".idle_stop.pid"
USERS_FILE = ".handle_pids.json"


def postmaster_pid(pgdata: Path) -> int | None:
    """Return the pid in `pgdata`'s postmaster.pid, None when there is none (no server)."""
    try:
        return int((pgdata / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def stop_postmaster(pgdata: Path, pid: int, wait_s: float = PG_CTL_WAIT_S) -> bool:
    """Ask the postmaster `pid` of `pgdata` for a fast shutdown (SIGINT, pg_ctl stop's default
    mode); return True once its lock file is gone (the postmaster removes it last), False when it
    is still there after `wait_s` seconds.

    Raises:
        OSError: the signal could not be sent (e.g. ProcessLookupError: no such process).
    """
    os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + wait_s
    while (pgdata / "postmaster.pid").exists():
        if time.monotonic() >= deadline:
            return False
        time.sleep(LOCK_FILE_POLL_S)
    return True


def process_running(pid: int) -> bool:
    """True when `pid` runs: its state in /proc is not a zombie's (a daemon's parent may reap it
    late), or, where there is no /proc, the pid exists (another user's process counts)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return False
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process (PostgreSQL runs as pgserver under root)
        pass
    return True


def _serves(pid: int, pgdata: Path) -> bool:
    """True when `pid` is a postgres whose command line names `pgdata` (not a reused pid)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return str(pgdata).encode() in f.read()
    except OSError:
        return False


def watcher_running(pgdata: Path) -> bool:
    """True when a watcher of `pgdata` runs (the pid of its file, running this program)."""
    try:
        pid = int((pgdata / WATCHER_FILE).read_text())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return Path(__file__).name.encode() in f.read() and process_running(pid)
    except (OSError, ValueError):
        return False


def live_users(pgdata: Path) -> list[int]:
    """The processes of pgserver's list of `pgdata`'s users that still run."""
    try:
        listed = json.loads((pgdata / USERS_FILE).read_text() or "[]")
    except (OSError, ValueError):
        return []
    return [pid for pid in listed if isinstance(pid, int) and process_running(pid)]


def watch(pgdata: Path, idle_s: float, lock_file: str) -> None:
    """Wait until `pgdata`'s server has had no user for `idle_s` seconds, then stop it."""
    import fasteners

    lock = fasteners.InterProcessLock(lock_file)
    me = os.getpid()
    (pgdata / WATCHER_FILE).write_text(str(me))
    seen = postmaster_pid(pgdata)
    pause = idle_s
    while True:
        time.sleep(max(0.05, pause))
        with lock:
            try:
                if int((pgdata / WATCHER_FILE).read_text()) != me:
                    return  # another watcher took over
            except ValueError:
                return
            except OSError:
                pass  # the folder is being deleted: look at the server below
            pid = postmaster_pid(pgdata)
            if pid is None:
                # Stopped by someone else (metis db stop), or its files deleted under it (a throwaway
                # home): a postmaster seen at the start that still runs there is asked to stop.
                if seen is not None and process_running(seen) and _serves(seen, pgdata):
                    with contextlib.suppress(OSError):
                        os.kill(seen, signal.SIGINT)
                return
            if not process_running(pid):
                return  # dead: the next command starts it again
            if live_users(pgdata):
                pause = max(idle_s, 1.0)  # look again later (a metis serve may run for days)
                continue
            try:
                pause = (pgdata / USERS_FILE).stat().st_mtime + idle_s - time.time()
            except OSError:
                pause = 0.0
            if pause > 0:
                continue  # someone joined or left since: idle for less than idle_s
            try:
                if not stop_postmaster(pgdata, pid):
                    continue  # still stopping after pg_ctl's wait: look again
            except OSError:
                return
            with contextlib.suppress(OSError):
                (pgdata / USERS_FILE).write_text("[]")  # only killed processes were left listed
                (pgdata / WATCHER_FILE).unlink(missing_ok=True)
            return


if __name__ == "__main__":
    watch(Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3])
