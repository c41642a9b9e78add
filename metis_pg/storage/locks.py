"""A base's two advisory locks: the write lock (per transaction) and the indexer lock (per session).

Writers of one base take its transaction-level write lock (:func:`lock_base`), so BM25
statistics rows are updated by one writer at a time; a writer that waits longer than
``Settings.lock_timeout_s`` for it gets :class:`~metis_pg.errors.BaseBusy`. One indexer
(or re-embedder) per base runs at a time (:func:`indexer_session`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg

from .. import db
from ..errors import BaseBusy, ConfigError

__all__ = ["lock_base", "indexer_session", "IndexerLock", "INDEXER_LOCK_SPACE"]

# A transaction-level advisory lock per base: key space 1 is ours.
_LOCK_SPACE = 0x6D65

# A session-level advisory lock per base, held (exclusive) by the one running indexer or
# re-embedder for as long as it runs: a base shows 'indexing' only while a live process holds
# it (the SQL function base_state, migration 0008, reads pg_locks with this key space). A killed
# process's lock goes with its connection, so a crash never leaves a base 'indexing' for ever.
INDEXER_LOCK_SPACE = 0x6D69


def _advisory(conn: psycopg.Connection, query: str, params: tuple) -> Any:
    """Run an advisory-lock function; a role refused them (migration 0008) is told how to fix it."""
    try:
        return conn.execute(query, params).fetchone()[0]
    except psycopg.errors.InsufficientPrivilege as exc:
        raise ConfigError(
            "this database role may not take advisory locks (migration 0008 revoked them from PUBLIC): "
            "run `GRANT EXECUTE ON FUNCTION pg_advisory_lock(integer, integer), pg_try_advisory_lock(integer, integer),"
            " pg_advisory_xact_lock(integer, integer), pg_try_advisory_xact_lock(integer, integer) TO <role>`"
            " as a superuser (docs/sql-views.md)"
        ) from exc


def lock_base(conn: psycopg.Connection, base_id: int) -> None:
    """Take the base's write lock until the end of the current transaction.

    Waits at most the connection's ``lock_timeout`` (``Settings.lock_timeout_s`` on pooled
    connections) for another writer of the base.

    Raises:
        BaseBusy: another session held the base's write lock for longer than that.
    """
    if _advisory(conn, "SELECT pg_try_advisory_xact_lock(%s, %s)", (_LOCK_SPACE, base_id)):
        return
    row = conn.execute(
        "SELECT name, current_setting('lock_timeout') FROM bases WHERE base_id = %s", (base_id,)
    ).fetchone()
    name, waited = row if row else (str(base_id), "lock_timeout")
    try:
        _advisory(conn, "SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_SPACE, base_id))
    except psycopg.errors.LockNotAvailable as exc:
        raise BaseBusy(
            f"base {name!r} is being written by another session: its write lock was not free within {waited}"
            " (setting lock_timeout_s); try again"
        ) from exc


class IndexerLock:
    """The indexer lock of a base, held on a connection of its own (:func:`indexer_session`)."""

    def __init__(self, pool: db.Pool, base_id: int) -> None:
        self._pool, self._base_id = pool, base_id
        self.conn: psycopg.Connection | None = None

    def _connect(self) -> psycopg.Connection:
        self.conn = db.connect(self._pool.conninfo, self._pool.settings, autocommit=True,
                               application_name="metis indexer")
        return self.conn

    def regain(self) -> None:
        """Hold the lock again after the server went away (a restart ends every session, and the
        lock with it); nothing to do while its session lives.

        Raises:
            BaseBusy: another indexer took the base meanwhile.
            DatabaseUnavailable: no connection to the database.
        """
        if self.conn is not None and not self.conn.broken:
            try:
                self.conn.execute("SELECT 1")
                return
            except psycopg.Error:
                pass
        with suppress(psycopg.Error):
            if self.conn is not None:
                self.conn.close()
        conn = self._connect()
        try:
            held = _advisory(conn, "SELECT pg_try_advisory_lock(%s, %s)", (INDEXER_LOCK_SPACE, self._base_id))
            row = None if held else conn.execute("SELECT name FROM bases WHERE base_id = %s",
                                                 (self._base_id,)).fetchone()
        except db.DATABASE_ERRORS as exc:
            raise db.unavailable(exc, self._pool.settings) from exc
        if not held:
            raise BaseBusy(f"base {row[0] if row else self._base_id!r} is being indexed by another process, which"
                           " took it while the database was away: try again when it has finished")


@contextmanager
def indexer_session(pool: db.Pool, base_id: int, *, wait_s: float | None = None) -> Iterator[IndexerLock]:
    """Be the one indexer of the base for the block: hold its indexer lock on a connection of its own.

    Not a pooled connection: the block itself needs the pool, and many indexing
    jobs at once must not exhaust it. Closing the connection releases the lock.
    A second indexer of the same base waits up to `wait_s` for the first to finish.
    Yields the lock (:class:`IndexerLock`): after the server went away, :meth:`IndexerLock.regain`
    holds it again.

    Args:
        wait_s: seconds to wait for another indexer of the base; None = ``Settings.indexer_wait_s``
            (the pool's settings).

    Raises:
        BaseBusy: another process indexes (or re-embeds) the base, and went on for `wait_s`.
        DatabaseUnavailable: no connection to the pool's database.
    """
    settings = pool.settings
    wait = settings.indexer_wait_s if wait_s is None else wait_s
    lock = IndexerLock(pool, base_id)
    conn = lock._connect()
    try:
        try:
            if wait > 0:
                conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{max(1, round(wait * 1000))}ms",))
                _advisory(conn, "SELECT pg_advisory_lock(%s, %s)", (INDEXER_LOCK_SPACE, base_id))
            elif not _advisory(conn, "SELECT pg_try_advisory_lock(%s, %s)", (INDEXER_LOCK_SPACE, base_id)):
                raise psycopg.errors.LockNotAvailable("busy")
        except psycopg.errors.LockNotAvailable as exc:
            row = conn.execute("SELECT name FROM bases WHERE base_id = %s", (base_id,)).fetchone()
            raise BaseBusy(
                f"base {row[0] if row else base_id!r} is being indexed by another process"
                f" (waited {wait:g} s, setting indexer_wait_s): try again when it has finished"
            ) from exc
        except db.DATABASE_ERRORS as exc:
            raise db.unavailable(exc, settings) from exc
        try:
            yield lock
        finally:
            # Released here, not by closing: the server ends a closed session a moment later,
            # and a status read in that moment would still see the lock.
            with suppress(psycopg.Error):  # a broken session took its lock with it
                lock.conn.execute("SELECT pg_advisory_unlock(%s, %s)", (INDEXER_LOCK_SPACE, base_id))
    finally:
        with suppress(psycopg.Error):
            lock.conn.close()
