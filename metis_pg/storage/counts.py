"""Search counts: one row per base, day (UTC) and mode (SPEC F20); the question is never stored."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import psycopg

from .. import db, sqlfiles
from ..config import Settings
from ..errors import DatabaseUnavailable

__all__ = ["count_search", "record_search"]

log = logging.getLogger(__name__)

#: Causes (SQLSTATE or class) of failed search counts already logged: each is logged once per process.
_count_failures: set[str] = set()


def count_search(conn: psycopg.Connection, base_ids: Sequence[int], mode: str, settings: Settings) -> None:
    """Add one search of `mode` for today (UTC) to each base (SPEC F20); the question is never stored.

    Best-effort: a count that cannot be written (a full disk, a read-only server, a
    lost connection, a timeout) never fails the search; each cause is logged once
    at WARNING (`settings` name the timeouts in the message). A base dropped since the search
    began is skipped (its counts went with it).
    """
    try:
        with conn.transaction():
            conn.execute(sqlfiles.load("storage/count_search"), {"base_ids": sorted(set(base_ids)), "mode": mode})
    except psycopg.errors.ForeignKeyViolation:
        pass
    except psycopg.Error as exc:
        _count_failed(exc, settings)


def record_search(pool: db.Pool, base_ids: Sequence[int], mode: str) -> None:
    """:func:`count_search` on a connection of `pool`; no free connection is a failed count too.

    For the search pipeline: nothing about counting a search can fail it.
    """
    try:
        with pool.connection() as conn:
            count_search(conn, base_ids, mode, pool.settings)
    except (DatabaseUnavailable, psycopg.Error) as exc:
        _count_failed(exc, pool.settings)


def _count_failed(exc: BaseException, settings: Settings) -> None:
    key = getattr(exc, "sqlstate", None) or type(exc).__name__
    if key not in _count_failures:
        _count_failures.add(key)
        cause = exc.message if isinstance(exc, DatabaseUnavailable) else db.cause_of(exc, settings)
        log.warning("a search was not counted (searches_per_day): %s; searches still answer", cause)
