"""Read replicas: reads go to PostgreSQL streaming standbys, writes to the primary.

``METIS_DATABASE_URL`` is the primary (writes, migrations, indexing);
``METIS_READ_DATABASE_URLS`` lists streaming replicas (comma-separated). A
:class:`ReadRouter` sends each read (a search, a comparison, an evaluation's
searches, the list of bases, notes, facts) to a healthy replica, round-robin:

- Every ``replica_check_interval_s`` (1 s) the replicas' lag is measured, by the
  request that finds the measurement due (no thread of its own): the primary's
  WAL position (``pg_current_wal_lsn()``) against each replica's replayed one. A
  replica that has replayed it lags 0 s; one behind lags at most the time since
  its last replayed transaction committed, and at most the time since the
  primary was measured at a position it has replayed (the smaller bound is
  reported). A replica lagging more than ``replica_max_lag_s`` (10 s) is skipped
  until it catches up; one that cannot be reached is tried again after 5 x the
  check interval.
- A read that fails on a replica (it went down, a query conflicted with
  recovery, the base is not there yet) is run on the next replica, then on the
  primary. Every replica skipped is named in a ``REPLICA_SKIPPED`` warning of the
  answer; ``READ_FROM_PRIMARY`` says the primary answered because no replica could.
- ``consistent=True`` (read-your-writes): the primary's WAL position is read first
  and the replica chosen must have replayed it within
  ``replica_consistent_wait_s`` (2 s); else the primary answers.

``METIS_READ_DATABASE_URLS`` may list the primary's own URL (``METIS_DATABASE_URL``) too:
the primary then takes its turn of the reads, as one more server (lag 0).

Searches still count themselves (SPEC F20) on the primary. With the primary
down, replicas keep answering reads (their lag is then unknown).

:func:`create_standby` (:mod:`metis_pg.db.standby`, re-exported here) makes a local streaming
standby of a primary with the embedded server's binaries (``pg_basebackup -R`` with a
replication slot); ``metis db replica create PATH`` calls it.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from . import db, sqlfiles
from .config import Settings
from .errors import BaseNotFound, DatabaseUnavailable
from .db.standby import create_standby, remove_standby, standby_url, start_standby, stop_standby
from .results import SearchWarning

__all__ = [
    "ReadRouter",
    "ReplicaStatus",
    "create_standby",
    "parse_urls",
    "replica_label",
    "standby_url",
    "start_standby",
    "stop_standby",
    "remove_standby",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Errors of a read on a replica after which the read is tried elsewhere (not the caller's business):
#: the replica is down or read-only-refusing (DatabaseUnavailable), or a query was cancelled by a
#: conflict with recovery (SQLSTATE 40001 on a standby), or the base is not there yet (lag).
_REPLICA_FAILURES: tuple[type[BaseException], ...] = (DatabaseUnavailable, pg_errors.SerializationFailure)

#: Seconds at most a replica's pool waits for a connection, and a probe connects: a replica that
#: does not answer quickly is skipped (the primary is there), not waited for.
_REPLICA_WAIT_S = 2.0
#: An unreachable replica is measured again after this many check intervals.
_RETRY_INTERVALS = 5


def parse_urls(text: str | Sequence[str] | None) -> list[str]:
    """Return the URLs of ``METIS_READ_DATABASE_URLS`` (comma-separated; blanks dropped)."""
    if not text:
        return []
    parts = text.split(",") if isinstance(text, str) else list(text)
    return [p.strip() for p in parts if p and p.strip()]


def replica_label(url: str) -> str:
    """Return ``host:port/dbname`` of a PostgreSQL URL, never its password (for warnings and /healthz)."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "a replica with an unreadable URL"
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    return f"{host}:{port}/{info.get('dbname') or info.get('user') or ''}"


def _lsn(text: str | None) -> int | None:
    """``16/B374D848`` -> an integer (None stays None)."""
    if not text:
        return None
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """One replica as last measured.

    Attributes:
        name: ``host:port/dbname`` (no password).
        status: ``ok`` (serves reads), ``lagging`` (more than ``replica_max_lag_s`` behind),
            ``unavailable`` (could not be reached or failed a read), ``not_standby``
            (``pg_is_in_recovery()`` is false: promoted, or not a replica), or ``unchecked``.
        lag_s: seconds behind the primary (an upper bound; 0 when it has replayed the
            primary's position; None when unknown: unreachable, or the primary is down).
        behind_bytes: WAL bytes still to replay (None when unknown).
        checked_s_ago: seconds since it was measured.
        error: why it is unavailable or skipped, in a few words (None when ok).
    """

    name: str
    status: str
    lag_s: float | None = None
    behind_bytes: int | None = None
    checked_s_ago: float | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON of one replica in ``GET /healthz`` (``metis status --json`` lists bases only)."""
        return {"name": self.name, "status": self.status,
                "lag_s": None if self.lag_s is None else round(self.lag_s, 3),
                "behind_bytes": self.behind_bytes, "checked_s_ago": None if self.checked_s_ago is None
                else round(self.checked_s_ago, 3), "error": self.error}

    def line(self) -> str:
        """One line for ``metis status``."""
        lag = "lag unknown" if self.lag_s is None else f"lag {self.lag_s:.2f} s"
        behind = "" if self.behind_bytes is None else f" ({self.behind_bytes} bytes to replay)"
        why = f" · {self.error}" if self.error else ""
        return f"replica {self.name}: {self.status} · {lag}{behind}{why}"


@dataclass
class _Replica:
    url: str
    name: str
    pool: db.Pool | None = None
    status: str = "unchecked"
    lag_s: float | None = None
    behind_bytes: int | None = None
    error: str | None = None
    checked_at: float | None = None
    next_check: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> ReplicaStatus:
        ago = None if self.checked_at is None else time.monotonic() - self.checked_at
        return ReplicaStatus(self.name, self.status, self.lag_s, self.behind_bytes, ago, self.error)


class ReadRouter:
    """Sends reads to healthy read replicas round-robin, and to the primary when none can serve.

    Thread-safe. Replica pools are opened when first measured; :meth:`close` closes them
    (not the primary's pool, which belongs to the caller).

    Args:
        primary: the primary's pool (writes; reads when no replica can serve).
        urls: the replicas' PostgreSQL URLs. The primary's own URL (`primary_dsn`) may be
            one of them: the primary then takes its turn of the reads (lag 0).
        settings: ``replica_max_lag_s``, ``replica_check_interval_s``,
            ``replica_consistent_wait_s``, ``database_wait_s`` are read.
        primary_dsn: the primary's URL, to recognise it among `urls`.
    """

    def __init__(self, primary: db.Pool, urls: Sequence[str], settings: Settings, *,
                 primary_dsn: str | None = None) -> None:
        self.primary = primary
        self.primary_dsn = primary_dsn
        self.settings = settings
        self._replica_settings = self.settings.model_copy(
            update={"database_wait_s": min(self.settings.database_wait_s, _REPLICA_WAIT_S)})
        self.replicas = [_Replica(url=u, name=replica_label(u)) for u in urls]
        self._turn = itertools.count()
        self._check_lock = threading.Lock()
        self._checked_once = False
        #: (monotonic time, primary LSN) of recent measurements: bounds a lagging replica's lag.
        self._samples: deque[tuple[float, int]] = deque(maxlen=256)
        self._closed = False
        #: Why the primary's WAL position could not be read last time (None: it was read).
        self._primary_error: str | None = None
        # With the primary down, writes fail at once for this long after a failed checkout (then
        # one waits again, up to database_wait_s): reads go on on the replicas meanwhile.
        primary.fail_fast_s = max(primary.fail_fast_s, _RETRY_INTERVALS * self.settings.replica_check_interval_s)

    # -- measuring -------------------------------------------------------------------

    def statuses(self, *, refresh: bool = True) -> list[ReplicaStatus]:
        """Return every replica's status; `refresh` measures them all now (one round trip each).

        Never raises: an unreachable primary or replica is reported in the statuses.
        """
        if refresh:
            self._refresh(force=True)
        return [r.snapshot() for r in self.replicas]

    def _refresh(self, *, force: bool = False) -> None:
        now = time.monotonic()
        due = self.replicas if force else [r for r in self.replicas if now >= r.next_check]
        if not due:
            return
        # The first measurement is waited for (there is nothing to route by before it); later
        # ones are taken by whichever request finds them due, the others go on with the last.
        if not self._check_lock.acquire(blocking=force or not self._checked_once):
            return
        try:
            primary_lsn = self._primary_lsn()
            for replica in due:
                self._measure(replica, primary_lsn)
            # A replica behind the primary's position at its first measurement, and with no transaction
            # replayed since it started, has no bound on its lag yet: measure again within a moment (the
            # sample just taken bounds it once it has replayed that far; the primary writes WAL of its
            # own, e.g. hint bits, without any transaction).
            for _ in range(10):
                unknown = [r for r in due if r.status == "lagging" and r.lag_s is None]
                if not unknown:
                    break
                time.sleep(0.05)
                primary_lsn = self._primary_lsn()
                for replica in unknown:
                    self._measure(replica, primary_lsn)
            self._checked_once = True
        finally:
            self._check_lock.release()

    def primary_down(self) -> str | None:
        """Why the primary cannot be reached, while its pool fails at once after a failed checkout; else None."""
        return self.primary.down()

    def _primary_lsn(self) -> str | None:
        if self.primary.down() is not None:
            return None
        try:
            # Half the wait: a read still has the rest of database_wait_s on a replica.
            with self.primary.connection(timeout=max(0.5, self.settings.database_wait_s / 2)) as conn:
                lsn = conn.execute(sqlfiles.load("replicas/primary_lsn")).fetchone()[0]
        except (DatabaseUnavailable, psycopg.Error) as exc:
            log.warning("the replicas' lag is unknown: the primary did not answer (%s)", exc)
            self._primary_error = exc.message if isinstance(exc, DatabaseUnavailable) else db.cause_of(exc, self.settings)
            return None
        self._primary_error = None
        self._samples.append((time.monotonic(), _lsn(lsn)))
        return lsn

    def _measure(self, replica: _Replica, primary_lsn: str | None) -> None:
        s = self.settings
        now = time.monotonic()
        if self.primary_dsn is not None and replica.url == self.primary_dsn:  # the primary reads in turn
            replica.pool, replica.checked_at, replica.next_check = self.primary, now, now + s.replica_check_interval_s
            ok = primary_lsn is not None
            replica.status, replica.lag_s, replica.behind_bytes = ("ok", 0.0, 0) if ok else ("unavailable", None, None)
            replica.error = None if ok else "the primary did not answer"
            return
        try:
            pool = self._pool_of(replica)
            with pool.connection() as conn:
                row = conn.execute(sqlfiles.load("replicas/replica_state"),
                                   {"primary_lsn": primary_lsn or "0/0"}).fetchone()
        except (DatabaseUnavailable, psycopg.Error) as exc:
            self._set_failed(replica, db.cause_of(exc, s) if not isinstance(exc, DatabaseUnavailable) else exc.message)
            return
        in_recovery, replay_lsn, behind, replay_age = row
        replica.checked_at = now
        replica.next_check = now + s.replica_check_interval_s
        if not in_recovery:
            replica.status, replica.lag_s, replica.behind_bytes = "not_standby", None, None
            replica.error = "not a standby (pg_is_in_recovery() is false): promoted, or not a replica"
            return
        if primary_lsn is None:  # the primary is down: serve reads, lag unknown
            replica.status, replica.lag_s, replica.behind_bytes = "ok", None, None
            replica.error = "the primary did not answer: lag unknown"
            return
        behind = int(behind) if behind is not None else None
        if behind is not None and behind <= 0:
            lag: float | None = 0.0
        else:
            bounds = []
            if replay_age is not None:
                bounds.append(max(0.0, float(replay_age)))
            replayed = _lsn(replay_lsn)
            if replayed is not None:
                seen = [t for t, lsn in self._samples if lsn <= replayed]
                if seen:
                    bounds.append(max(0.0, now - max(seen)))
            lag = min(bounds) if bounds else None
        replica.lag_s, replica.behind_bytes = lag, max(behind, 0) if behind is not None else None
        if lag is None or lag > s.replica_max_lag_s:
            replica.status = "lagging"
            shown = "an unknown time" if lag is None else f"{lag:.1f} s"
            replica.error = f"lags {shown} behind the primary (more than {s.replica_max_lag_s:g} s: replica_max_lag_s)"
        else:
            replica.status, replica.error = "ok", None

    def _pool_of(self, replica: _Replica) -> db.Pool:
        with replica.lock:
            if replica.pool is None or replica.pool.closed:
                # A probe first: opening a pool on a server that refuses waits out the pool's wait.
                db.connect(replica.url, self._replica_settings).close()
                replica.pool = db.Pool(replica.url, settings=self._replica_settings)
            return replica.pool

    def _set_failed(self, replica: _Replica, cause: str) -> None:
        now = time.monotonic()
        replica.status, replica.lag_s, replica.behind_bytes = "unavailable", None, None
        replica.error = cause
        replica.checked_at = now
        replica.next_check = now + _RETRY_INTERVALS * self.settings.replica_check_interval_s
        with replica.lock:
            pool, replica.pool = replica.pool, None
        if pool is not None and pool is not self.primary:  # stop its background reconnection attempts
            threading.Thread(target=pool.close, kwargs={"timeout": 5}, name="metis-replica-close",
                             daemon=True).start()

    # -- routing -----------------------------------------------------------------------

    def run(self, read: Callable[[db.Pool], T], *, consistent: bool = False) -> tuple[T, list[SearchWarning]]:
        """Run ``read(pool)`` on a healthy replica (round-robin), else on the primary.

        `read` must only read (a write fails on a standby, and is then run on the primary).

        Args:
            consistent: the replica must first have replayed every transaction committed on
                the primary before this call (waited up to ``replica_consistent_wait_s``).

        Returns:
            (what `read` returned, the warnings: each replica skipped, and the primary
            answering when none could).

        Raises:
            Whatever `read` raises on the primary; on a replica its DatabaseUnavailable,
            recovery conflicts and BaseNotFound send it elsewhere instead.
            DatabaseUnavailable: `consistent` while a replica could serve but the primary's WAL
            position cannot be read (the primary is down): the message says why no replica may
            answer and that one answers without `consistent`.
        """
        if not self.replicas or self._closed:
            return read(self.primary), []
        self._refresh()
        warnings: list[SearchWarning] = []
        usable = [r for r in self.replicas if r.status == "ok" and r.pool is not None]
        for r in self.replicas:
            if r not in usable:
                warnings.append(_skipped(r.name, r.error or r.status))
        if usable:
            start = next(self._turn) % len(usable)
            order = usable[start:] + usable[:start]
            target = self._primary_lsn() if consistent else None
            if consistent and target is None:
                raise DatabaseUnavailable(self._no_consistent_read(usable))
            for i, replica in enumerate(order):
                pool = replica.pool
                if pool is None:
                    warnings.append(_skipped(replica.name, replica.error or "unavailable"))
                    continue
                try:
                    if consistent and not self._replayed(pool, target):
                        warnings.append(_skipped(
                            replica.name, f"it had not replayed the primary's latest writes within "
                                          f"{self.settings.replica_consistent_wait_s:g} s (replica_consistent_wait_s)"))
                        break  # the others lag as much, most likely: the primary is consistent
                    answer = read(pool)
                    down = self.primary.down()
                    if down is not None:
                        warnings.append(SearchWarning(
                            "PRIMARY_UNAVAILABLE", f"the primary cannot be reached ({down}): replica {replica.name}"
                                                   f" answered, its lag unknown; searches are not counted"))
                    return answer, warnings
                except BaseNotFound as exc:
                    warnings.append(_skipped(replica.name, f"{exc.message} there (it may lag)"))
                    break  # the primary knows best
                except _REPLICA_FAILURES as exc:
                    cause = exc.message if isinstance(exc, DatabaseUnavailable) else db.cause_of(exc, self.settings)
                    log.warning("replica %s failed a read: %s", replica.name, cause)
                    self._set_failed(replica, cause)
                    warnings.append(_skipped(replica.name, cause))
        warnings.append(SearchWarning("READ_FROM_PRIMARY", "no replica could serve this read: the primary answered"))
        return read(self.primary), warnings

    def _no_consistent_read(self, usable: Sequence[_Replica]) -> str:
        """Why a consistent read cannot be answered while the primary's WAL position cannot be read."""
        cause = self.primary.down() or self._primary_error or "it did not answer"
        names = (f"replica {usable[0].name}" if len(usable) == 1
                 else "one of the replicas " + ", ".join(r.name for r in usable))
        return (f"a consistent read (read-your-writes: consistent=True, --consistent) cannot be answered: it needs"
                f" the primary's latest WAL position to know a replica has replayed every write, and the primary"
                f" cannot be reached ({cause}). Without it the search is answered by {names}, its lag"
                f" unknown")

    def _replayed(self, pool: db.Pool, lsn: str) -> bool:
        """Poll the replica until it has replayed `lsn`; False after ``replica_consistent_wait_s``."""
        deadline = time.monotonic() + self.settings.replica_consistent_wait_s
        pause = 0.002
        with pool.connection() as conn:
            while True:
                if conn.execute(sqlfiles.load("replicas/replayed"), {"lsn": lsn}).fetchone()[0]:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                time.sleep(min(pause, left))
                pause = min(pause * 2, 0.05)

    def close(self) -> None:
        """Close the replicas' pools."""
        self._closed = True
        for r in self.replicas:
            with r.lock:
                pool, r.pool = r.pool, None
            if pool is not None and pool is not self.primary:
                pool.close()


def _skipped(name: str, why: str) -> SearchWarning:
    return SearchWarning("REPLICA_SKIPPED", f"replica {name} skipped: {why}")
