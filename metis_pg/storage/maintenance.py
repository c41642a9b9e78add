"""Planner statistics and dead row versions, kept by metis itself at the end of a run that wrote.

Autovacuum looks at a database once a minute (``autovacuum_naptime``), and the embedded server
of a CLI user lives as long as a command: seconds. Left to autovacuum, a base indexed by ``metis
index`` was searched on the planner's defaults for ever (``reltuples`` -1, never analyzed), and
``bm25_terms`` kept one dead row version per common term per batch written (800 one-document
transactions: 35,000 dead versions beside 3,700 live ones; the keyword statement took 3-6 s
instead of ~30 ms until a VACUUM ANALYZE; docs/performance.md, "Planner statistics kept by the
indexer").

:func:`maintain` runs, on the tables autovacuum's own rule says are due
(``sql/storage/tables_due.sql``), what autovacuum would have: ANALYZE, VACUUM, or both. The rule
keeps it cheap for a small run: a one-file save changes a few rows of tables of 100,000 chunks,
far below their thresholds (50 rows + 10% of the table for ANALYZE), so it costs one query of
the statistics views. It never fails the run: a database error is logged as a warning, tables
locked by another VACUUM or ANALYZE are skipped (``SKIP_LOCKED``), a role that may not maintain a
table skips it, and on a Citus database nothing is done (its workers' autovacuum keeps the shards).

:func:`flush_statistics` makes a writing session publish its row counts at once: PostgreSQL
holds a busy session's counts back for up to 10 s (``PGSTAT_IDLE_INTERVAL``), and the rule would
otherwise not see a run's last batches (measured: a second INSERT within a second of the first
showed in ``pg_stat_user_tables`` 10.1 s later).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from .. import db, sqlfiles
from ..errors import MetisError

__all__ = ["TABLES", "TableDue", "Maintenance", "tables_due", "maintain", "flush_statistics"]

log = logging.getLogger(__name__)

#: The tables metis writes (every one but ``alembic_version`` and ``analyst_limits``, which
#: migrations and the operator write): what :func:`maintain` looks at by default.
TABLES: tuple[str, ...] = (
    "documents", "chunks", "posting_blocks", "block_lengths", "bm25_terms", "bm25_totals", "embeddings",
    "vector_notes", "facts", "sources", "bases", "search_counts",
)

#: ``pg_stat_force_next_flush()`` exists from PostgreSQL 15 (statistics in shared memory).
_FLUSH_SINCE = 150000


@dataclass(frozen=True, slots=True)
class TableDue:
    """A table autovacuum's rule says is due (a row of ``sql/storage/tables_due.sql``).

    Attributes:
        table: its name as ``regclass`` prints it (schema-qualified when not on the search path).
        analyze, vacuum: which of the two is due.
        reltuples: the planner's row count (-1: never analyzed nor vacuumed).
        modified, dead, inserted: ``n_mod_since_analyze``, ``n_dead_tup``, ``n_ins_since_vacuum``.
    """

    table: str
    analyze: bool
    vacuum: bool
    reltuples: float
    modified: int
    dead: int
    inserted: int


@dataclass(frozen=True, slots=True)
class Maintenance:
    """What :func:`maintain` did.

    Attributes:
        analyzed, vacuumed: the tables ANALYZEd and VACUUMed (a table can be in both).
        seconds: wall time of the whole call (the query of the statistics views included).
        per_table: seconds each table's statement took.
        warnings: what the server or the connection said instead (also logged); none when all went well.
    """

    analyzed: tuple[str, ...] = ()
    vacuumed: tuple[str, ...] = ()
    seconds: float = 0.0
    per_table: tuple[tuple[str, float], ...] = ()
    warnings: tuple[str, ...] = ()


def flush_statistics(conn: psycopg.Connection) -> None:
    """Have this session publish its pending table counts when it next goes idle (PostgreSQL 15+;
    nothing before), so that :func:`tables_due` of another session sees the writes it committed."""
    if conn.info.server_version >= _FLUSH_SINCE:
        conn.execute("SELECT pg_stat_force_next_flush()")


def tables_due(conn: psycopg.Connection, tables: Sequence[str] = TABLES) -> list[TableDue]:
    """Return the `tables` autovacuum's rule says are due now (``sql/storage/tables_due.sql``).

    Empty on a Citus database, and for tables the role may not VACUUM and ANALYZE.
    """
    rows = conn.execute(sqlfiles.load("storage/tables_due"), {"tables": list(tables)}).fetchall()
    return [TableDue(*row) for row in rows]


def maintain(pool: db.Pool, tables: Sequence[str] = TABLES) -> Maintenance:
    """ANALYZE and VACUUM the `tables` that are due, as autovacuum would; return what was done.

    The statistics views are read on a pooled connection; only when a table is due, a connection
    of its own (autocommit: VACUUM cannot run in a transaction block, without statement_timeout:
    work, not a wait) runs per table ``VACUUM (ANALYZE, SKIP_LOCKED)``, ``VACUUM (SKIP_LOCKED)`` or
    ``ANALYZE (SKIP_LOCKED)``. Never raises for the database: a run that wrote its rows is not
    failed by their upkeep (errors are logged and returned as warnings); KeyboardInterrupt passes.
    """
    started = time.perf_counter()
    warnings: list[str] = []
    analyzed: list[str] = []
    vacuumed: list[str] = []
    per_table: list[tuple[str, float]] = []
    try:
        with pool.connection() as conn:
            due = tables_due(conn, tables)
        if due:
            conn = db.connect(pool.conninfo, pool.settings, autocommit=True, application_name="metis maintenance")
            # The server WARNs (and goes on) when it skips a table: locked (SKIP_LOCKED), or not permitted.
            conn.add_notice_handler(lambda d: warnings.append(d.message_primary or "")
                                    if d.severity_nonlocalized == "WARNING" else None)
            with conn:
                conn.execute("SET statement_timeout = 0")
                for t in due:
                    if t.vacuum:
                        statement = sql.SQL("VACUUM ({}) {}").format(
                            sql.SQL("ANALYZE, SKIP_LOCKED" if t.analyze else "SKIP_LOCKED"), sql.SQL(t.table))
                    else:
                        statement = sql.SQL("ANALYZE (SKIP_LOCKED) {}").format(sql.SQL(t.table))
                    t0 = time.perf_counter()
                    conn.execute(statement)
                    per_table.append((t.table, time.perf_counter() - t0))
                    if t.analyze:
                        analyzed.append(t.table)
                    if t.vacuum:
                        vacuumed.append(t.table)
    except (psycopg.Error, MetisError) as exc:
        warnings.append(f"statistics not refreshed: {exc}")
    for warning in warnings:
        log.warning("table upkeep: %s", warning)
    return Maintenance(tuple(analyzed), tuple(vacuumed), time.perf_counter() - started, tuple(per_table),
                       tuple(warnings))
