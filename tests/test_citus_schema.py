"""Issue 12: the schema is ready for Citus distribution by base_id (sql/citus/).

No Citus here: what can be checked on plain PostgreSQL is. ``sql/citus/keys.sql`` (run by
docker/compose.citus.yaml before ``distribute.sql``) re-keys the large tables by
(base_id, id); on the embedded PostgreSQL 18 these tests apply it and run metis on the
result: index, search in every mode, re-index a changed file, delete one, notes, facts
that replace one another, drop a base. And they check what Citus requires of the result:
every primary key, unique constraint and foreign key between distributed tables holds
base_id, and distribute.sql names every table of the schema that has a base_id column.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import metis_pg
from metis_pg import migrate
from metis_pg.config import Settings

import hash_embedder
from corpus import write_corpus
from pg_servers import embedded_server

CITUS = Path(__file__).resolve().parents[1] / "sql" / "citus"
REFERENCE = {"bases", "sources"}
LOCAL = {"alembic_version", "analyst_limits"}


def distributed_and_reference() -> tuple[list[str], list[str]]:
    text = (CITUS / "distribute.sql").read_text()
    arrays = re.findall(r"unnest\(ARRAY\[([^\]]*)\]", text)
    names = [re.findall(r"'(\w+)'", a) for a in arrays]
    return names[1], names[0]


@pytest.fixture(scope="module")
def keyed() -> Iterator[str]:
    """A migrated embedded PostgreSQL with sql/citus/keys.sql applied (twice: it is idempotent)."""
    with embedded_server("citus-keys") as (uri, _):
        migrate.upgrade(uri, settings=Settings.from_env())
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute((CITUS / "keys.sql").read_text())
            conn.execute((CITUS / "keys.sql").read_text())
        yield uri


@pytest.fixture(scope="module")
def hash_url() -> Iterator[str]:
    with hash_embedder.serve() as url:
        yield url


def constraints(uri: str) -> list[tuple[str, str, str, list[str]]]:
    """(table, constraint, type p/u/f, its columns) of the public tables."""
    with psycopg.connect(uri) as conn:
        return conn.execute(
            "SELECT c.conrelid::regclass::text, c.conname, c.contype::text,"
            "       array_agg(a.attname::text ORDER BY k.ord)"
            " FROM pg_constraint AS c"
            " CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k (attnum, ord)"
            " JOIN pg_attribute AS a ON a.attrelid = c.conrelid AND a.attnum = k.attnum"
            " WHERE c.contype IN ('p', 'u', 'f') AND c.connamespace = 'public'::regnamespace"
            " GROUP BY 1, 2, 3 ORDER BY 1, 2").fetchall()


def test_distribute_sql_names_every_table_of_the_schema(keyed):
    distributed, reference = distributed_and_reference()
    with psycopg.connect(keyed) as conn:
        tables = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            " AND table_type = 'BASE TABLE'")}
        with_base_id = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE table_schema = 'public'"
            " AND column_name = 'base_id'")}

    assert set(reference) == REFERENCE
    assert tables == set(distributed) | set(reference) | LOCAL, "a table is missing from sql/citus/distribute.sql"
    assert set(distributed) <= with_base_id
    assert distributed[0] == "documents"  # the others are co-located with it


def test_every_key_of_a_distributed_table_holds_base_id(keyed):
    distributed, _ = distributed_and_reference()
    found = constraints(keyed)

    for table, name, kind, columns in found:
        if table in distributed and kind in ("p", "u"):
            assert columns[0] == "base_id", f"{table}.{name} {columns}: Citus needs base_id in it"
    foreign = {(t, n): c for t, n, k, c in found if k == "f" and t in distributed}
    with psycopg.connect(keyed) as conn:
        targets = dict(conn.execute(
            "SELECT conname, confrelid::regclass::text FROM pg_constraint WHERE contype = 'f'").fetchall())
    for (table, name), columns in foreign.items():
        if targets[name] in distributed:  # between distributed tables: co-located by base_id
            assert columns[0] == "base_id", f"{table}.{name} {columns}"
    assert ("facts", "facts_superseded_by_fkey") in foreign


def test_unique_indexes_of_distributed_tables_hold_base_id(keyed):
    distributed, _ = distributed_and_reference()
    with psycopg.connect(keyed) as conn:
        rows = conn.execute(
            "SELECT t.relname::text, i.relname::text, pg_get_indexdef(x.indexrelid) FROM pg_index AS x"
            " JOIN pg_class AS t ON t.oid = x.indrelid JOIN pg_class AS i ON i.oid = x.indexrelid"
            " WHERE x.indisunique AND t.relnamespace = 'public'::regnamespace").fetchall()
    for table, index, definition in rows:
        if table in distributed:
            assert "(base_id" in definition, f"{table}.{index}: {definition}"


def test_metis_runs_on_the_base_id_keys(keyed, hash_url, tmp_path):
    corpus = {"kiln.txt": "The kiln schedule: bisque firing on Tuesday, glaze firing on Friday.",
              "orchard.md": "# Orchard\n\nThe orchard gives copper apples in autumn.",
              "gone.txt": "This file will be deleted: a lighthouse keeper's log."}
    folder = write_corpus(tmp_path / "kb", corpus)
    with metis_pg.Metis(keyed, settings=Settings()) as m:
        m.create_base("kb", embedding_model="hash-words", embedding_url=hash_url, embedding_dim=hash_embedder.DIM)
        first = m.index("kb", folder)
        for mode in ("hybrid", "dense", "keyword"):
            assert m.search("kb", "kiln glaze firing schedule", mode=mode).results
        assert m.search("kb", "kiln glaze firing", mode="keyword").results[0].citation.document == "kiln.txt"

        (folder / "kiln.txt").write_text("The kiln is cold in August: no firing.")
        (folder / "gone.txt").unlink()
        second = m.index("kb", folder)
        found = m.search("kb", "lighthouse keeper", mode="keyword")
        august = m.search("kb", "kiln August", mode="keyword")

        note = m.add_note("kb", "Pier", "The pier lamp is green.")
        notes = m.notes("kb")
        m.delete_note("kb", note)
        m.create_base("mem", kind="memory", embedding_model="hash-words", embedding_url=hash_url,
                      embedding_dim=hash_embedder.DIM)
        old = m.remember("mem", "Ana leads the kiln team.", key="ana/role")
        new = m.remember("mem", "Ana leads the orchard team.", key="ana/role")
        facts = m.facts("mem")
        remembered = m.search("mem", "Ana team", mode="keyword")
        m.drop_base("mem")
        m.drop_base("kb")
        left = m.list_bases()

    assert (first.new, second.changed, second.deleted) == (3, 1, 1)
    assert "gone.txt" not in [r.citation.document for r in found.results]
    assert august.results[0].citation.document == "kiln.txt" and "August" in august.results[0].text
    assert [(n.note_id, n.text) for n in notes] == [(note, "The pier lamp is green.")]
    assert [(f.fact_id, f.holds, f.superseded_by) for f in facts] == [(old, False, new), (new, True, None)]
    assert remembered.results[0].holds is True
    assert left == []
    with psycopg.connect(keyed) as conn:
        counts = conn.execute("SELECT (SELECT count(*) FROM documents) + (SELECT count(*) FROM chunks)"
                              " + (SELECT count(*) FROM embeddings) + (SELECT count(*) FROM posting_blocks)"
                              " + (SELECT count(*) FROM facts)").fetchone()[0]
    assert counts == 0  # the drops cascaded through the composite keys
