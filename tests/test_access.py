"""Who may read what (issue 21, part 2): readers of sources and documents, enforced by row-level security.

A base with an open folder, a folder readable by ``hr`` only, and a folder whose documents' front
matter may narrow its readers. For every mode, a document readable only by ``hr`` never reaches
``eng``: not its text, title, path, snippet, citation nor a count; the same rows checked as the
database roles (``metis_search`` with principals, an analyst through the views).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import psycopg
import pytest
from psycopg import sql

import metis_pg
from metis_pg import InvalidInput, access

import hash_embedder

SECRET = "zanzibarpayroll"
MODES = ("keyword", "dense", "hybrid")

FILES = {
    "open/handbook.md": "# Handbook\n\nVacation days and the payroll calendar for everyone. The office opens at nine.\n",
    "open/payroll-faq.md": "# Payroll FAQ\n\nWhen is payroll paid? Payroll runs on the last day of the month.\n",
    "hr/salaries.md": (f"# Salaries {SECRET}\n\nThe payroll table {SECRET}: every salary of every person, "
                       "vacation days owed, and the payroll calendar.\n"),
    "narrow/legal-only.md": ("---\nreaders: [legal]\n---\n# Contract terms\n\nThe payroll clause of the "
                             f"contract {SECRET}legal.\n"),
    "narrow/both.md": f"# Both groups\n\nThe payroll memo {SECRET}both for hr and legal.\n",
    "narrow/outsider.md": "---\nreaders: eng\n---\n# Outsider\n\nA payroll note naming a group the source lacks.\n",
    "ignored/front.md": "---\nreaders: [hr]\n---\n# Ignored front matter\n\nThe payroll note anyone reads.\n",
}


def _leaks(value: object, needles: tuple[str, ...] = (SECRET, "salaries", "Salaries")) -> list[str]:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return [n for n in needles if n in text]


@pytest.fixture(scope="module")
def kb(metis: metis_pg.Metis, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    root = tmp_path_factory.mktemp("access")
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    name = f"t-access-{uuid.uuid4().hex[:8]}"
    with hash_embedder.serve() as url:
        metis.create_base(name, embedding_model=hash_embedder.MODEL, embedding_url=url,
                          embedding_dim=hash_embedder.DIM)
        try:
            metis.index(name, root / "open")
            metis.index(name, root / "hr", readers=["HR"])
            metis.index(name, root / "narrow", readers="hr,legal", front_matter_readers=True)
            metis.index(name, root / "ignored")
            yield SimpleNamespace(name=name, root=root, url=url)
        finally:
            metis.drop_base(name)


def _paths(answer) -> set[str]:
    return {r.citation.document for r in answer.results}


def test_documents_get_their_readers_from_source_and_front_matter(metis, kb):
    with metis.pool.connection() as conn:
        rows = dict(conn.execute(
            "SELECT d.path, d.readers FROM documents d JOIN bases b USING (base_id) WHERE b.name = %s",
            (kb.name,)).fetchall())
    assert rows == {"handbook.md": [], "payroll-faq.md": [], "salaries.md": ["hr"],
                    "legal-only.md": ["legal"], "both.md": ["hr", "legal"], "outsider.md": ["!none"],
                    "front.md": []}


@pytest.mark.parametrize("mode", MODES)
def test_a_document_of_hr_never_reaches_eng(metis, kb, mode):
    for question in (SECRET, f"payroll {SECRET} salary", "payroll calendar vacation days"):
        answer = metis.search(kb.name, question, mode=mode, top_k=20, principals=["eng"])
        assert _paths(answer) <= {"handbook.md", "payroll-faq.md", "front.md"}, question
        assert not _leaks({**answer.to_dict(), "question": None}), question
        ranks = sorted(r.scores.keyword_rank for r in answer.results if r.scores.keyword_rank is not None)
        assert ranks == list(range(1, len(ranks) + 1))  # no rank held by an unseen chunk
        dense = sorted(r.scores.dense_rank for r in answer.results if r.scores.dense_rank is not None)
        assert dense == list(range(1, len(dense) + 1))
    operator = metis.search(kb.name, f"payroll {SECRET} salary", mode=mode, top_k=20)
    assert "salaries.md" in _paths(operator)
    hr = metis.search(kb.name, f"payroll {SECRET} salary", mode=mode, top_k=20, principals=["hr"])
    assert "salaries.md" in _paths(hr) and "legal-only.md" not in _paths(hr) and "outsider.md" not in _paths(hr)
    legal = metis.search(kb.name, f"payroll {SECRET} salary", mode=mode, top_k=20, principals=["legal", "x"])
    assert {"legal-only.md", "both.md"} <= _paths(legal) and "salaries.md" not in _paths(legal)


@pytest.mark.parametrize("mode", MODES)
def test_a_token_without_groups_reads_only_documents_without_readers(metis, kb, mode):
    answer = metis.search(kb.name, "payroll", mode=mode, top_k=20, principals=[])
    assert _paths(answer) == {"handbook.md", "payroll-faq.md", "front.md"}
    assert not _leaks(answer.to_dict())


def test_per_document_compare_and_filters_see_only_what_eng_may_read(metis, kb):
    per_doc = metis.search(kb.name, "payroll", top_k=20, per_document=True, principals=["eng"])
    assert _paths(per_doc) == {"handbook.md", "payroll-faq.md", "front.md"}
    compared = metis.compare(kb.name, f"payroll {SECRET}", top_k=20, principals=["eng"]).to_dict()
    compared.pop("question")  # the caller's own words
    assert compared["passages"] and not _leaks(compared)
    # A filter keeping only hr's folder: for eng, the filters match no document (nothing is said of hr's).
    filtered = metis.search(kb.name, "payroll", mode="keyword", filters={"sources": ["hr"]}, principals=["eng"])
    assert filtered.results == ()
    assert [w.code for w in filtered.warnings] == ["FILTERS_MATCH_NOTHING"]
    assert not _leaks(filtered.to_dict())


def test_get_ls_and_chunks_of_hr_are_not_found_for_eng(metis, kb):
    with pytest.raises(metis_pg.NotFound) as refused:
        metis.get(kb.name, "salaries.md", principals=["eng"])
    with pytest.raises(metis_pg.NotFound) as missing:
        metis.get(kb.name, "nowhere.md", principals=["eng"])
    # The same answer as for a path no document has (the path asked is echoed, nothing else).
    assert refused.value.message == missing.value.message.replace("nowhere.md", "salaries.md")
    with pytest.raises(metis_pg.NotFound) as near:
        metis.get(kb.name, "salarie.md", principals=["eng"])  # no suggestion of a hidden path
    assert "salaries.md" not in near.value.message
    with pytest.raises(metis_pg.NotFound):
        metis.get(kb.name, "salaries.md", source="hr", principals=["eng"])
    assert "salaries.md" not in {d.info.document for d in metis.get(kb.name, "*", principals=["eng"])}
    listed = metis.documents(kb.name, principals=["eng"])
    assert {d.document for d in listed} == {"handbook.md", "payroll-faq.md", "front.md"}
    assert {s.name: s.documents for s in metis.sources(kb.name, principals=["eng"])}["hr"] == 0
    [hr_doc] = metis.get(kb.name, "salaries.md", principals=["hr"])
    chunk_id = hr_doc.chunks[0].chunk_id
    with pytest.raises(metis_pg.NotFound):
        metis.get_chunk(kb.name, chunk_id, principals=["eng"])
    assert SECRET in metis.get_chunk(kb.name, chunk_id).text  # the operator reads everything


def test_a_bases_counts_are_of_what_the_principals_may_read(metis, kb):
    """metis status, GET /bases and the console's Bases page counted every document (hidden ones too)."""
    everything = metis.base(kb.name)
    eng = metis.base(kb.name, principals=["eng"])
    listed = {b.name: b for b in metis.list_bases(principals=["eng"])}[kb.name]
    assert everything.documents == 7
    assert eng.documents == listed.documents == 3  # handbook.md, payroll-faq.md, front.md
    assert 0 < eng.chunks == listed.chunks < everything.chunks
    assert metis.base(kb.name, principals=["hr"]).documents == 5  # + salaries.md, both.md
    assert metis.base(kb.name, principals=[]).documents == 3


def test_the_pool_keeps_no_role_after_a_read_on_behalf(metis, kb):
    for _ in range(metis.pool.max_size + 1):
        metis.search(kb.name, "payroll", mode="keyword", principals=["eng"])
    with metis.pool.connection() as conn:
        assert conn.execute("SELECT current_user = session_user, "
                            "coalesce(current_setting('metis.principals', true), '')").fetchone() == (True, "")


def test_changing_a_sources_readers_changes_its_documents_at_once(metis, kb):
    metis.index(kb.name, kb.root / "hr", readers=[])
    try:
        assert "salaries.md" in _paths(metis.search(kb.name, SECRET, mode="keyword", principals=["eng"]))
    finally:
        metis.index(kb.name, kb.root / "hr", readers=["hr"])
    assert "salaries.md" not in _paths(metis.search(kb.name, SECRET, mode="keyword", principals=["eng"]))
    # A later run without --readers keeps the source's.
    metis.index(kb.name, kb.root / "hr")
    assert "salaries.md" not in _paths(metis.search(kb.name, SECRET, mode="keyword", principals=["eng"]))


_STALE_ROWS = """
SELECT count(*) FILTER (WHERE r.readers IS DISTINCT FROM d.readers), count(*) FILTER (WHERE r.readers <> '{}')
FROM documents AS d
JOIN bases AS b ON b.base_id = d.base_id AND b.name = %s
CROSS JOIN LATERAL (SELECT c.readers FROM chunks AS c WHERE c.document_id = d.document_id
                    UNION ALL
                    SELECT e.readers FROM embeddings AS e WHERE e.document_id = d.document_id) AS r
"""
_READABLE = ("SELECT (SELECT count(*) FROM chunks AS c JOIN bases AS b USING (base_id) WHERE b.name = %(base)s),"
             " (SELECT count(*) FROM embeddings AS e JOIN bases AS b USING (base_id) WHERE b.name = %(base)s)")


def _rows_as(conn: psycopg.Connection, base: str, principals: list[str] | None) -> tuple[int, int]:
    """(chunks, vectors) of `base` that `principals` read from the tables alone (None: the operator)."""
    if principals is not None:
        access.begin_on_behalf(conn, principals)
    try:
        return conn.execute(_READABLE, {"base": base}).fetchone()
    finally:
        conn.rollback()


def test_chunks_and_vectors_carry_their_documents_readers_through_changes(metis, kb, dsn):
    # Migration 0024: the policies of chunks and embeddings read the rows' own readers, which the
    # triggers keep equal to their document's, also when a source's readers change after indexing.
    with psycopg.connect(dsn) as conn:
        stale, restricted = conn.execute(_STALE_ROWS, (kb.name,)).fetchone()
        assert stale == 0 and restricted > 0
        everything = _rows_as(conn, kb.name, None)
        eng = _rows_as(conn, kb.name, ["eng"])
        assert eng[0] < everything[0] and eng[1] < everything[1]
        metis.index(kb.name, kb.root / "hr", readers=[])
        try:
            assert conn.execute(_STALE_ROWS, (kb.name,)).fetchone()[0] == 0
            opened = _rows_as(conn, kb.name, ["eng"])
            assert opened[0] > eng[0] and opened[1] > eng[1]
        finally:
            metis.index(kb.name, kb.root / "hr", readers=["hr"])
        assert conn.execute(_STALE_ROWS, (kb.name,)).fetchone() == (0, restricted)
        assert _rows_as(conn, kb.name, ["eng"]) == eng


@pytest.mark.parametrize("bad", [["hr'}"], ["a,b"], ["Ünïcode"], "hr"])
def test_a_malformed_principal_is_refused_before_any_read(metis, kb, bad):
    with pytest.raises(InvalidInput):
        metis.search(kb.name, "payroll", mode="keyword", principals=bad)


# -- as the database roles -------------------------------------------------------------------------


def _counts(conn: psycopg.Connection, base: str) -> tuple[int, int, int, int]:
    return conn.execute(
        "SELECT (SELECT count(*) FROM documents d JOIN bases b USING (base_id) WHERE b.name = %(b)s AND d.title LIKE %(s)s),"
        " (SELECT count(*) FROM chunks c JOIN bases b USING (base_id) WHERE b.name = %(b)s AND c.text LIKE %(s)s),"
        " (SELECT count(*) FROM embeddings e JOIN documents d USING (document_id) JOIN bases b ON b.base_id = e.base_id"
        "  WHERE b.name = %(b)s AND d.path = 'salaries.md'),"
        " (SELECT count(*) FROM embeddings e JOIN bases b USING (base_id) WHERE b.name = %(b)s)",
        {"b": base, "s": f"%{SECRET}%"}).fetchone()


def test_row_level_security_applies_to_metis_search_on_a_superuser_connection(metis, kb, dsn):
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0]
        operator = _counts(conn, kb.name)
        assert operator[:3] == (1, 3, 1)
        conn.rollback()
        access.begin_on_behalf(conn, ["eng"])
        assert conn.execute("SELECT current_user::text").fetchone()[0] == "metis_search"
        eng = _counts(conn, kb.name)
        assert eng[:3] == (0, 0, 0) and eng[3] < operator[3]
        # metis_search can neither bypass nor escape the policies, nor write.
        assert conn.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = 'metis_search'"
                            ).fetchone() == (False, False)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE documents SET readers = '{}'")
        conn.rollback()
        access.begin_on_behalf(conn, ["hr"])
        assert _counts(conn, kb.name)[:3] == (1, 2, 1)  # not legal-only.md


def test_analysts_read_the_views_under_the_policies(metis, kb, dsn):
    login = f"analyst_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("CREATE ROLE metis_reader_hr NOLOGIN") if not admin.execute(
            "SELECT 1 FROM pg_roles WHERE rolname = 'metis_reader_hr'").fetchone() else None
        admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN IN ROLE metis_analyst").format(sql.Identifier(login)))
        try:
            with psycopg.connect(dsn) as conn:
                conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(login)))
                seen = conn.execute(
                    "SELECT (SELECT count(*) FROM metis.chunk_citations_v4 WHERE base = %(b)s AND text LIKE %(s)s),"
                    " (SELECT count(*) FROM metis.documents WHERE base = %(b)s AND document = 'salaries.md'),"
                    " (SELECT count(*) FROM metis.chunk_citations WHERE base = %(b)s AND text LIKE %(s)s),"
                    " (SELECT count(*) FROM metis.postings_v2 WHERE base = %(b)s),"
                    " (SELECT documents FROM metis.base_health_v3 WHERE base = %(b)s)",
                    {"b": kb.name, "s": f"%{SECRET}%"}).fetchone()
                assert seen == (0, 0, 0, 0, 3)  # the open documents only; no postings of a base with readers
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute("SELECT count(*) FROM chunks")
                conn.rollback()
                conn.execute("SET metis.principals = '{hr}'")  # an analyst cannot pose as a group
                conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(login)))
                assert conn.execute("SELECT count(*) FROM metis.documents WHERE base = %s AND document = "
                                    "'salaries.md'", (kb.name,)).fetchone()[0] == 0
            admin.execute(sql.SQL("GRANT metis_reader_hr TO {}").format(sql.Identifier(login)))
            with psycopg.connect(dsn) as conn:
                conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(login)))
                assert conn.execute("SELECT count(*) FROM metis.chunk_citations_v4 WHERE base = %s AND text LIKE %s",
                                    (kb.name, f"%{SECRET}%")).fetchone()[0] == 2  # salaries.md and both.md
        finally:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(login)))


def test_every_view_of_schema_metis_is_read_with_the_rights_of_metis_views(metis):
    with metis.pool.connection() as conn:
        owners = conn.execute("SELECT viewname, viewowner FROM pg_views WHERE schemaname = 'metis'").fetchall()
    assert owners and {owner for _, owner in owners} == {"metis_views"}, owners


# -- the real model ------------------------------------------------------------------------------------


def test_dense_search_with_the_bundled_model_keeps_hr_from_eng(metis, base_name, tmp_path):
    (tmp_path / "open").mkdir()
    (tmp_path / "secret").mkdir()
    (tmp_path / "open" / "a.md").write_text("# Holidays\n\nHow many vacation days employees get.\n")
    (tmp_path / "secret" / "b.md").write_text(f"# Pay {SECRET}\n\nThe salary of every employee.\n")
    metis.index(base_name, tmp_path / "open")
    metis.index(base_name, tmp_path / "secret", readers=["hr"])
    for mode in ("dense", "hybrid"):
        eng = metis.search(base_name, "salary of employees", mode=mode, principals=["eng"])
        assert _paths(eng) == {"a.md"} and not _leaks(eng.to_dict())
        assert "b.md" in _paths(metis.search(base_name, "salary of employees", mode=mode, principals=["hr"]))


def test_token_groups_are_parsed_from_the_tokens_setting():
    assert access.parse_token_groups(["a" * 20 + "=hr+Legal", "b" * 20]) == {"a" * 20: ("hr", "legal"),
                                                                            "b" * 20: ()}
    for bad in (["c" * 20 + "=h r"], ["short=hr"], ["d" * 20 + "=hr", "d" * 20 + "=eng"]):
        with pytest.raises(metis_pg.ConfigError):
            access.parse_token_groups(bad, min_chars=16)


def test_front_matter_is_ignored_unless_the_source_allows_it(metis, kb, tmp_path: Path):
    answer = metis.search(kb.name, "payroll note anyone reads", mode="keyword", principals=["eng"])
    assert "front.md" in _paths(answer)


def test_a_search_of_several_bases_reads_each_for_the_principals(metis, kb, tmp_path: Path):
    other = f"t-access2-{uuid.uuid4().hex[:8]}"
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "notes.md").write_text("# Payroll notes\n\nPayroll questions for everyone.\n")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "bonus.md").write_text(f"# Bonus {SECRET}\n\nThe payroll bonus {SECRET}.\n")
    metis.create_base(other, embedding_model=hash_embedder.MODEL, embedding_url=kb.url,
                      embedding_dim=hash_embedder.DIM)
    try:
        metis.index(other, tmp_path / "more")
        metis.index(other, tmp_path / "secret", readers=["hr"])
        for mode in MODES:
            answer = metis.search([kb.name, other], f"payroll {SECRET}", mode=mode, top_k=30, principals=["eng"])
            assert {r.base for r in answer.results} == {kb.name, other}
            assert not _leaks({**answer.to_dict(), "question": None}) and "bonus.md" not in _paths(answer)
            hr = metis.search([kb.name, other], f"payroll {SECRET}", mode=mode, top_k=30, principals=["hr"])
            assert {"bonus.md", "salaries.md"} <= _paths(hr)
    finally:
        metis.drop_base(other)


@pytest.mark.parametrize("mode", ("keyword", "hybrid"))
def test_more_hidden_chunks_than_the_keyword_leg_keeps_never_take_its_places(metis, kb, tmp_path: Path, mode):
    # More hidden chunks than the leg keeps (leg_limit 50), all scoring above the readable ones: the
    # leg's drop list (hybrid.sql's hidden) keeps them out before anything is ranked.
    other = f"t-access3-{uuid.uuid4().hex[:8]}"
    (tmp_path / "open").mkdir()
    (tmp_path / "hr").mkdir()
    (tmp_path / "open" / "a.md").write_text("".join(f"# Open {i}\n\nPayroll for all, part {i}.\n\n" for i in range(5)))
    paragraph = " ".join(["payroll ledger entries"] * 40)
    (tmp_path / "hr" / "big.md").write_text("".join(f"# Part {i} {SECRET}\n\n{paragraph} {i}.\n\n" for i in range(260)))
    metis.create_base(other, embedding_model=hash_embedder.MODEL, embedding_url=kb.url,
                      embedding_dim=hash_embedder.DIM)
    try:
        metis.index(other, tmp_path / "open")
        metis.index(other, tmp_path / "hr", readers=["hr"])
        with metis.pool.connection() as conn:
            hidden = conn.execute("SELECT count(*) FROM chunks c JOIN documents d USING (document_id)"
                                  " JOIN bases b ON b.base_id = d.base_id WHERE b.name = %s AND d.readers = '{hr}'",
                                  (other,)).fetchone()[0]
        assert hidden > 200
        answer = metis.search(other, "payroll ledger", mode=mode, top_k=10, principals=["eng"])
        assert _paths(answer) == {"a.md"} and not _leaks({**answer.to_dict(), "question": None})
        ranks = sorted(r.scores.keyword_rank for r in answer.results)
        assert ranks == list(range(1, len(ranks) + 1)) and len(ranks) == 5
        assert "big.md" in _paths(metis.search(other, "payroll ledger", mode=mode, principals=["hr"]))
    finally:
        metis.drop_base(other)
