"""The indexer keeps the planner statistics and bm25_terms' dead row versions itself (storage.maintenance).

A CLI command's embedded server lives seconds and autovacuum looks once a minute: before this,
a base indexed by ``metis index`` had ``reltuples`` -1 (never analyzed) on every table, and
``bm25_terms`` one dead row version per common term per batch. Each test works in a database of
its own (the session database's tables hold every other test's rows and autovacuum's work), and
tells the indexer's ANALYZE and VACUUM from autovacuum's by ``last_analyze`` / ``last_vacuum``
(autovacuum sets ``last_autoanalyze`` / ``last_autovacuum``).
"""

from __future__ import annotations

import uuid

import numpy as np
import psycopg
import pytest
from psycopg import sql

import metis_pg
from metis_pg import migrate, storage
from metis_pg.config import Settings

import hash_embedder
from cli_runner import run_cli
from corpus import write_corpus
from pg_servers import new_database

BIG = ("documents", "chunks", "posting_blocks", "bm25_terms")


@pytest.fixture()
def own_database(dsn):
    """A new database migrated to head on the test server; dropped after the test."""
    with new_database(dsn, "metis_stats") as url:
        migrate.upgrade(url, settings=Settings.from_env())
        yield url


@pytest.fixture(scope="module")
def hash_url():
    with hash_embedder.serve() as url:
        yield url


def _texts(n: int, seed: int = 7) -> dict[str, str]:
    """`n` Markdown files of a few paragraphs of words drawn from a Zipf-like law over 3,000 made-up words."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}x{chr(97 + i % 26)}" for i in range(3000)]
    p = 1.0 / np.arange(1, len(vocab) + 1)
    p /= p.sum()
    files = {}
    for d in range(n):
        paragraphs = [" ".join(rng.choice(vocab, size=120, p=p)) for _ in range(4)]
        files[f"doc{d:03d}.md"] = f"# Document {d}\n\n" + "\n\n".join(paragraphs) + "\n"
    return files


def table_state(url: str) -> dict[str, dict]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT s.relname, c.reltuples, s.n_dead_tup, s.last_analyze, s.last_vacuum"
            " FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid").fetchall()
    return {r[0]: {"reltuples": r[1], "dead": r[2], "last_analyze": r[3], "last_vacuum": r[4]} for r in rows}


def test_metis_index_leaves_statistics_and_no_dead_terms_and_a_small_run_leaves_them(own_database, hash_url,
                                                                                     tmp_path):
    with metis_pg.Metis(own_database) as m:
        m.create_base("kb", embedding_model="hash-words", embedding_url=hash_url, embedding_dim=64)
    folder = write_corpus(tmp_path / "kb", _texts(60))
    before = table_state(own_database)
    assert all(before[t]["reltuples"] < 0 for t in ("documents", "chunks", "bm25_terms"))

    # One document per transaction: each batch gives every common term's bm25_terms row a new version.
    first = run_cli("index", str(folder), "--base", "kb", "--batch", "1", "--dsn", own_database, "--json")

    assert first.code == 0, first.stderr
    assert first.json()["new"] == 60
    after = table_state(own_database)
    for table in BIG:
        assert after[table]["reltuples"] > 0, (table, after[table])
        assert after[table]["last_analyze"] is not None, (table, after[table])  # ours, not autovacuum's
    assert after["embeddings"]["last_analyze"] is not None  # phase 2 (the vectors) too
    assert after["bm25_terms"]["last_vacuum"] is not None
    assert after["bm25_terms"]["dead"] == 0
    with psycopg.connect(own_database) as conn:
        assert conn.execute("SELECT count(*) FROM bm25_terms").fetchone()[0] == pytest.approx(
            after["bm25_terms"]["reltuples"], rel=0.01)
        assert storage.tables_due(conn, BIG) == []  # nothing left due

    # One file changed: far below every big table's threshold (50 rows + 10% of the table).
    (folder / "doc000.md").write_text("# Document 0\n\nA short new text about kilns.\n", encoding="utf-8")
    second = run_cli("index", str(folder), "--base", "kb", "--dsn", own_database, "--json")

    assert second.code == 0, second.stderr
    assert (second.json()["changed"], second.json()["unchanged"]) == (1, 59)
    again = table_state(own_database)
    for table in BIG:
        assert again[table]["last_analyze"] == after[table]["last_analyze"], table
        assert again[table]["last_vacuum"] == after[table]["last_vacuum"], table


def test_the_rule_is_autovacuums_and_a_role_that_may_not_maintain_is_skipped(own_database):
    with psycopg.connect(own_database, autocommit=True) as conn:
        storage.tables_due(conn)  # the statement runs on an empty database
        conn.execute("ANALYZE bm25_totals")
        conn.execute("INSERT INTO bases (name, kind, spec) VALUES ('x', 'documents', '{}')")
        # reltuples -1 (never analyzed) is due at once; an analyzed table waits for 50 + 10% changes.
        due = {t.table: t for t in storage.tables_due(conn, ["bases", "bm25_totals"])}
        assert set(due) == {"bases"} and due["bases"].analyze and not due["bases"].vacuum
        conn.execute("ANALYZE bases")
        for _ in range(60):
            conn.execute("UPDATE bases SET spec = '{}' WHERE name = 'x'")
        conn.execute("SELECT pg_stat_force_next_flush()")
        due = {t.table: t for t in storage.tables_due(conn, ["bases"])}
        assert due["bases"].analyze  # 61 changes > 50 + 0.1 x 1
        conn.execute("ALTER TABLE bases SET (autovacuum_analyze_threshold = 1000, autovacuum_vacuum_threshold = 1000)")
        assert storage.tables_due(conn, ["bases"]) == []  # the table's own setting wins
        role = f"metis_stats_{uuid.uuid4().hex[:8]}"
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        try:
            conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(sql.Identifier(role)))
            conn.execute("ALTER TABLE bases RESET (autovacuum_analyze_threshold, autovacuum_vacuum_threshold)")
            conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
            assert storage.tables_due(conn, ["bases"]) == []  # due, but not this role's to maintain
            conn.execute("RESET ROLE")
            assert storage.tables_due(conn, ["bases"]) != []
        finally:
            conn.execute("RESET ROLE")
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_an_upkeep_the_database_refuses_is_a_warning_not_a_failed_run(own_database, monkeypatch, caplog):
    from metis_pg.errors import DatabaseUnavailable
    from metis_pg.storage import maintenance

    def refused(*args, **kwargs):
        raise DatabaseUnavailable("could not connect to PostgreSQL: the server is not running")

    monkeypatch.setattr(maintenance.db, "connect", refused)
    with metis_pg.Metis(own_database) as m:
        with m.pool.connection() as conn:
            assert storage.tables_due(conn, ["bases"])  # never analyzed: due
        done = storage.maintain(m.pool, ["bases"])

    assert (done.analyzed, done.vacuumed) == ((), ())
    assert done.warnings == ("statistics not refreshed: could not connect to PostgreSQL: the server is not running",)
    assert "statistics not refreshed" in caplog.text


def test_notes_and_facts_keep_the_statistics_too(own_database, hash_url):
    """``metis note add`` and ``metis remember`` are CLI commands too: their writes end with the upkeep."""
    with metis_pg.Metis(own_database) as m:
        m.create_base("mem", kind="memory", embedding_model="hash-words", embedding_url=hash_url, embedding_dim=64)
        m.remember("mem", "The kiln runs at 1,200 degrees on Mondays.", key="kiln")
        first = table_state(own_database)
        for table in ("documents", "chunks", "bm25_terms", "facts"):
            assert first[table]["last_analyze"] is not None, table  # never analyzed: due at once
        for i in range(5):  # a few more: far below the thresholds now
            m.remember("mem", f"The kiln runs at {1200 + i} degrees on Mondays.", key="kiln")
        assert table_state(own_database)["chunks"]["last_analyze"] == first["chunks"]["last_analyze"]
