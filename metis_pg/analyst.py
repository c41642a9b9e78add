"""The limits of the analyst role's members (SPEC F20; issue 26): connections and statement time.

The members of ``metis_analyst`` (``GRANT metis_analyst TO alice``) may hold at
most ``METIS_ANALYST_MAX_CONNECTIONS`` connections together, and each of their
sessions starts with ``statement_timeout`` = ``METIS_ANALYST_STATEMENT_TIMEOUT_S``:
both kept by a login event trigger (migration 0014) that reads the table
``analyst_limits``, which :func:`apply_limits` writes. ``metis db upgrade`` and
``metis serve`` apply the current settings after migrating. See docs/sql-views.md.

``statement_timeout`` is a user setting: a member may ``SET statement_timeout = 0``.
So ``metis serve`` also runs :class:`AnalystWatchdog`, a thread that looks at the
server's sessions every ``METIS_ANALYST_WATCHDOG_INTERVAL_S`` and cancels
(``pg_cancel_backend``) each statement of a member that has run longer than the
limit, from the service's own connection, which a member cannot touch.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import psycopg

from . import sqlfiles
from .config import Settings
from .errors import MetisError

__all__ = ["apply_limits", "AnalystWatchdog", "Signalled"]

log = logging.getLogger(__name__)

#: Whether the role running the watchdog may see the analysts' statements and cancel them.
_MAY_WATCH = ("SELECT coalesce((SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user), false)"
              " OR (pg_catalog.pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER')"
              " AND pg_catalog.pg_has_role(current_user, 'pg_signal_backend', 'MEMBER'))")

#: Seconds past the limit after which a statement the cancel did not stop has its session ended.
TERMINATE_AFTER_S = 10.0


def apply_limits(conn: psycopg.Connection, settings: Settings, *,
                 max_connections: int | None = None, statement_timeout_s: float | None = None) -> None:
    """Write the analyst limits: the arguments given, else `settings`'.

    Takes effect at the members' next logins; sessions already open keep theirs.
    """
    connections = settings.analyst_max_connections if max_connections is None else max_connections
    seconds = settings.analyst_statement_timeout_s if statement_timeout_s is None else statement_timeout_s
    conn.execute(sqlfiles.load("analyst/set_limits"),
                 {"max_connections": connections, "statement_timeout_ms": round(seconds * 1000)})


@dataclass(frozen=True)
class Signalled:
    """One statement of an analyst the watchdog stopped.

    Attributes:
        pid: the server process of the session.
        user: the member of metis_analyst it runs as.
        seconds: how long the statement had run when it was signalled.
        action: ``"cancel"`` (``pg_cancel_backend``) or ``"terminate"`` (``pg_terminate_backend``:
            still running :data:`TERMINATE_AFTER_S` past the limit).
        signalled: what the server answered (False: the process had already gone).
    """

    pid: int
    user: str
    seconds: float
    action: str
    signalled: bool


class AnalystWatchdog:
    """Cancels the statements of members of metis_analyst that run longer than their limit.

    The limit is ``analyst_limits.statement_timeout_ms`` (``METIS_ANALYST_STATEMENT_TIMEOUT_S``;
    0: none), the one the login trigger sets as the session's ``statement_timeout``; unlike that
    setting, a member cannot lift this. The service's connection must be a superuser's or hold
    ``pg_read_all_stats`` (to see other roles' statements) and ``pg_signal_backend`` (on a server
    of your own: ``GRANT pg_read_all_stats, pg_signal_backend TO metis``); else one WARNING says
    so and nothing is cancelled. A statement runs at most the limit plus one
    `interval_s` (cancel), and one still running :data:`TERMINATE_AFTER_S` later has its session
    ended.

    Args:
        pool: the service's :class:`~metis_pg.db.Pool`.
        interval_s: seconds between two looks (``METIS_ANALYST_WATCHDOG_INTERVAL_S``).
    """

    def __init__(self, pool, interval_s: float) -> None:
        self._pool = pool
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned: set[str] = set()

    def sweep(self) -> list[Signalled]:
        """Look once: signal every statement of a member over its limit; return them (logged as WARNING).

        Raises:
            DatabaseUnavailable: the database did not answer.
            psycopg.errors.InsufficientPrivilege: the service's role may not see or signal the analysts.
        """
        with self._pool.connection(timeout=max(1.0, self.interval_s)) as conn:
            # Without pg_read_all_stats another role's sessions show no state or start time in
            # pg_stat_activity: the watchdog would see nothing to cancel, silently.
            if not conn.execute(_MAY_WATCH).fetchone()[0]:
                raise psycopg.errors.InsufficientPrivilege(
                    f"{conn.info.user} is neither a superuser nor a member of pg_read_all_stats and pg_signal_backend")
            rows = conn.execute(sqlfiles.load("analyst/cancel_overlong"),
                                {"terminate_after_s": TERMINATE_AFTER_S}).fetchall()
        found = [Signalled(*row) for row in rows]
        for s in found:
            log.warning("analyst watchdog: %s the statement of %s (pid %d) after %.0f s, over "
                        "METIS_ANALYST_STATEMENT_TIMEOUT_S", "cancelled" if s.action == "cancel" else "ended the session of",
                        s.user, s.pid, s.seconds)
        return found

    def start(self) -> "AnalystWatchdog":
        """Run :meth:`sweep` every `interval_s` in a daemon thread until :meth:`stop` (0: not started)."""
        if self.interval_s > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="metis-analyst-watchdog", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (waits for a look under way, at most `timeout` seconds)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sweep()
            except psycopg.errors.InsufficientPrivilege as exc:
                self._warn_once("privilege", "analyst watchdog: the service's role may not see or cancel the "
                                f"analysts' statements ({exc.diag.message_primary or exc}): grant it "
                                "pg_read_all_stats and pg_signal_backend")
            except psycopg.errors.UndefinedTable:
                self._warn_once("schema", "analyst watchdog: no analyst_limits table (run `metis db upgrade`)")
            except MetisError as exc:  # the database down or restarting: the next look tries again
                self._warn_once(exc.code, f"analyst watchdog: {exc.message}")
            except Exception:  # never let the thread die silently
                log.exception("analyst watchdog: unexpected error")

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message)
