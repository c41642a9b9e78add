"""Search counts never delay an answer (issue 26, item 7).

With a ``search_counts`` row locked by another session, searches waited for the
lock (5 s) and then a connection: p95 6.1 s. Now a count that cannot be written
at once stays pending in memory and is written with a later one: the answer is
never kept waiting, and nothing is lost.
"""

from __future__ import annotations

import time

import psycopg

import metis_pg
from metis_pg.search_counts import counts_of


def counted(metis: metis_pg.Metis, base: str) -> int:
    with metis.pool.connection() as conn:
        return conn.execute("SELECT coalesce(sum(searches), 0) FROM search_counts JOIN bases USING (base_id)"
                            " WHERE name = %s", (base,)).fetchone()[0]


def test_a_locked_count_row_never_delays_a_search_and_the_count_is_written_later(dsn, metis, base_name):
    metis.create_base(base_name)
    metis.add_note(base_name, "lantern", "The harbour lantern is lit at dusk.")
    metis.search(base_name, "lantern", mode="keyword")
    assert counted(metis, base_name) == 1
    with psycopg.connect(metis.pool.conninfo) as holder:
        holder.execute("SELECT * FROM search_counts JOIN bases USING (base_id) WHERE name = %s FOR UPDATE",
                       (base_name,))  # a session holding the row, as a long analyst transaction or a stall would
        seconds = []
        for _ in range(3):
            started = time.monotonic()
            assert metis.search(base_name, "lantern", mode="keyword").results
            seconds.append(time.monotonic() - started)
        assert counts_of(metis.pool).pending == 3  # kept, not lost
    # The row is free again: the next search writes its count and the three pending ones.
    metis.search(base_name, "lantern", mode="keyword")
    assert counted(metis, base_name) == 5
    assert counts_of(metis.pool).pending == 0
    assert max(seconds) < 1.0, seconds  # it was the lock timeout (5 s) plus the search


def test_pending_counts_are_written_when_the_metis_closes(dsn, metis, base_name):
    metis.create_base(base_name)
    metis.add_note(base_name, "lantern", "The harbour lantern is lit at dusk.")
    with metis_pg.Metis(dsn) as other:
        other.search(base_name, "lantern", mode="keyword")
        with psycopg.connect(metis.pool.conninfo) as holder:
            holder.execute("SELECT * FROM search_counts JOIN bases USING (base_id) WHERE name = %s FOR UPDATE",
                           (base_name,))
            other.search(base_name, "lantern", mode="hybrid")
            other.search(base_name, "lantern", mode="hybrid")
            assert counts_of(other.pool).pending == 2
    # `other` closed after the lock was released: its last flush wrote them.
    with metis.pool.connection() as conn:
        rows = dict(conn.execute("SELECT mode, sum(searches) FROM search_counts JOIN bases USING (base_id)"
                                 " WHERE name = %s GROUP BY mode", (base_name,)).fetchall())
    assert rows == {"keyword": 1, "hybrid": 2}
