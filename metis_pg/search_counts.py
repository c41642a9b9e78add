"""Search counts (SPEC F20) that never delay an answer.

Every search adds one per base, UTC day and mode to ``search_counts``. The row
of a busy base is a hot spot: a count that waited for its lock (or for a free
connection) delayed the search that made it, by up to the lock timeout plus the
pool's wait (p99 11 s with a row held, issue 26). So a count:

- is added in memory first (:class:`SearchCounts`, one per database pool), then
  written with the other pending ones in one statement (``sql/counts/add_searches.sql``);
- takes a connection only if one is free within :data:`CHECKOUT_S`, waits at most
  10 ms for a row lock and does not wait for its commit's WAL flush
  (``sql/counts/without_waiting.sql``);
- when the rows or the connections are busy, stays pending: it is written with the
  next search's count, or when the :class:`~metis_pg.Metis` closes
  (:meth:`SearchCounts.flush`). Nothing is lost while the database works;
- when the count cannot be written at all (a full disk, a read-only server, a lost
  connection), it is dropped with one WARNING per cause (as before: searches still answer).
"""

from __future__ import annotations

import datetime as dt
import threading
import weakref
from collections import Counter
from collections.abc import Sequence

import psycopg

from . import sqlfiles
from .errors import DatabaseUnavailable

__all__ = ["SearchCounts", "counts_of", "CHECKOUT_S"]

#: Seconds a count waits for a free connection of the pool; busier than that, it stays pending.
CHECKOUT_S = 0.02
#: Seconds the last flush (at close) waits for a free connection and a row lock.
CLOSING_WAIT_S = 1.0

_Key = tuple[int, dt.date, str]


class SearchCounts:
    """The searches of one database pool not yet written, and their writing (see the module docstring).

    Thread-safe: searches of several threads add to one counter; one flush at a time writes.
    """

    def __init__(self, pool) -> None:
        self._pool = weakref.ref(pool)
        self._pending: Counter[_Key] = Counter()
        self._lock = threading.Lock()
        self._writing = threading.Lock()

    @property
    def pending(self) -> int:
        """Searches counted in memory, not yet written (for each of their bases)."""
        with self._lock:
            return sum(self._pending.values())

    def add(self, base_ids: Sequence[int], mode: str) -> None:
        """Count one search of `mode` for each base of `base_ids` today (UTC); write what is pending if
        that costs no wait. Never raises, never blocks on the database."""
        day = dt.datetime.now(dt.timezone.utc).date()
        with self._lock:
            for base_id in set(base_ids):
                self._pending[(base_id, day, mode)] += 1
        self.flush()

    def flush(self, *, closing: bool = False) -> None:
        """Write the pending counts; busy rows or connections keep them pending.

        Args:
            closing: the last flush (the Metis closes): wait up to :data:`CLOSING_WAIT_S`
                for a connection and the row locks, then drop what is still busy with a WARNING.
        """
        from .storage.counts import _count_failed  # one WARNING per cause, shared with storage.count_search

        pool = self._pool()
        if pool is None or not self._writing.acquire(blocking=closing):
            return  # another thread is writing: it may take ours too, else the next search does
        try:
            with self._lock:
                batch, self._pending = self._pending, Counter()
            if not batch:
                return
            rows = sorted(batch.items())
            params = {
                "base_ids": [k[0] for k, _ in rows], "days": [k[1] for k, _ in rows],
                "modes": [k[2] for k, _ in rows], "searches": [n for _, n in rows],
            }
            try:
                with pool.connection(timeout=CLOSING_WAIT_S if closing else CHECKOUT_S) as conn:
                    if not closing:
                        conn.execute(sqlfiles.load("counts/without_waiting"))
                    conn.execute(sqlfiles.load("counts/add_searches"), params)
            except Exception as exc:  # noqa: BLE001 - nothing about a count may fail a search
                if _busy(exc) and not closing:
                    with self._lock:
                        self._pending.update(batch)  # written with the next count
                elif not isinstance(_cause(exc), psycopg.errors.ForeignKeyViolation):
                    _count_failed(exc, pool.settings)
        finally:
            self._writing.release()


def _cause(exc: BaseException) -> BaseException:
    return exc.__cause__ if isinstance(exc, DatabaseUnavailable) and exc.__cause__ is not None else exc


def _busy(exc: BaseException) -> bool:
    """A row lock held by another transaction, or no free connection: try again later."""
    from psycopg_pool import PoolTimeout

    cause = _cause(exc)
    return isinstance(cause, (psycopg.errors.LockNotAvailable, PoolTimeout))


_counters: "weakref.WeakKeyDictionary[object, SearchCounts]" = weakref.WeakKeyDictionary()
_counters_lock = threading.Lock()


def counts_of(pool) -> SearchCounts:
    """The :class:`SearchCounts` of database pool `pool` (a :class:`metis_pg.db.Pool`: its settings
    name the waits in a failed count's WARNING), made on first use."""
    with _counters_lock:
        counter = _counters.get(pool)
        if counter is None:
            counter = _counters[pool] = SearchCounts(pool)
        return counter
