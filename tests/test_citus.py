"""Issue 22: metis on a real Citus cluster, the tables distributed by base_id (docs/scaling.md).

Runs only when METIS_CITUS_URL names a Citus coordinator (skipped with the reason otherwise):
nothing of Citus is in this repository. The module empties that database and runs the
deployment steps of docker/compose.citus.yaml (``metis db upgrade``, ``sql/citus/keys.sql``,
``sql/citus/distribute.sql``), then everything through the Python API and the CLI: indexing
(words and vectors), searches in every mode, over one base (a router query: EXPLAIN) and
several, compare, evaluate, re-indexing, deletes, notes, facts, get/ls, status, the analyst
views, the search count, drops, and a statement Citus refuses turned into a MetisError.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest

import metis_pg
from metis_pg import db, fusion, retrieval
from metis_pg.config import Settings
from metis_pg.tokenizer import query_terms

import hash_embedder
from citus_cluster import URL, fresh_schema, needs_citus, partitions
from cli_runner import run_cli
from corpus import write_corpus
from model_servers import FakeService, openai_embeddings

pytestmark = needs_citus

KILN = {
    "kiln.txt": "The kiln schedule: bisque firing on Tuesday, glaze firing on Friday.",
    "orchard.md": "# Orchard\n\nThe orchard gives copper apples in autumn; the cider press runs in October.",
    "gone.txt": "This file will be deleted: a lighthouse keeper's log of the storms.",
    "guide/clay.md": "# Clay\n\nStoneware clay is wedged before throwing.\n\nPorcelain clay shrinks more in the kiln.",
}
HARBOUR = {
    "lantern.txt": "The harbour master keeps the lantern lit at night for the fishing boats.",
    "ferries.txt": "Ferries leave the harbour at noon; the kiln of the old pottery is by the pier.",
    "market.txt": "The fish market opens before dawn.",
}
DISTRIBUTED = {"documents", "chunks", "embeddings", "posting_blocks", "block_lengths", "bm25_terms", "bm25_totals",
               "facts", "search_counts", "vector_notes"}


@pytest.fixture(scope="module")
def cluster() -> str:
    fresh_schema(URL)
    return URL


@pytest.fixture(scope="module")
def hash_url() -> Iterator[str]:
    with hash_embedder.serve() as url:
        yield url


@pytest.fixture(scope="module")
def m(cluster) -> Iterator[metis_pg.Metis]:
    with metis_pg.Metis(cluster, settings=Settings()) as metis:
        yield metis


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("citus")
    return {"kb": write_corpus(root / "kb", KILN), "harbour": write_corpus(root / "harbour", HARBOUR)}


@pytest.fixture(scope="module")
def bases(m, hash_url, folders) -> dict[str, metis_pg.IndexReport]:
    reports = {}
    for name in ("kb", "harbour"):
        m.create_base(name, embedding_model="hash-words", embedding_url=hash_url, embedding_dim=hash_embedder.DIM)
        reports[name] = m.index(name, folders[name])
    return reports


def sql(statement: str, params=None) -> list[tuple]:
    with psycopg.connect(URL, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def test_the_deployment_steps_distribute_every_table_by_base_id(cluster):
    found = partitions(cluster)

    assert {t for t, (method, _) in found.items() if method == "h"} == DISTRIBUTED
    assert {t for t, (method, _) in found.items() if method == "n"} == {"bases", "sources"}
    assert len({found[t][1] for t in DISTRIBUTED}) == 1  # all co-located with documents
    assert fresh_schema.__module__ and "distributed by base_id" in _run_distribute_again(cluster)


def _run_distribute_again(url: str) -> str:
    """distribute.sql is idempotent: every start of the compose file runs it again."""
    from citus_cluster import CITUS, psql

    return psql(url, CITUS / "keys.sql", CITUS / "distribute.sql")


def test_indexing_writes_words_and_vectors_on_the_workers(m, bases):
    assert (bases["kb"].new, bases["kb"].failed, bases["harbour"].new) == (4, (), 3)
    info = {b.name: b for b in m.list_bases()}
    assert (info["kb"].documents, info["kb"].status, info["kb"].chunks_without_vector) == (4, "ready", 0)
    assert info["kb"].chunks == sql("SELECT count(*) FROM chunks WHERE base_id = "
                                    "(SELECT base_id FROM bases WHERE name = 'kb')")[0][0] > 0
    # The rows live in shards on the workers, not on the coordinator.
    placed = sql("SELECT DISTINCT n.nodeport FROM pg_dist_shard AS s JOIN pg_dist_placement AS p USING (shardid)"
                 " JOIN pg_dist_node AS n USING (groupid) WHERE s.logicalrelid = 'chunks'::regclass")
    assert len(placed) >= 2


@pytest.mark.parametrize("mode", ["hybrid", "dense", "keyword"])
def test_a_search_of_one_base_answers_in_every_mode(m, bases, mode):
    answer = m.search("kb", "kiln glaze firing schedule", mode=mode, top_k=3)

    assert answer.results and answer.warnings == ()
    if mode != "dense":  # hashed words are no semantic model: the keyword legs pick the kiln for sure
        assert answer.results[0].citation.document == "kiln.txt"
    filtered = m.search("kb", "clay kiln", mode=mode, filters={"path_prefix": "guide/"})
    assert {r.citation.document for r in filtered.results} == {"guide/clay.md"}


#: The hybrid statement's cases: (query embedding, filters, only_chunks, exclude_terms).
ROUTER_CASES = {
    "keyword-legs": (False, {}, None, None),
    # Every filter at once, a phrase's chunks and an exclusion (each adds a CTE or a subquery).
    "both-legs-filtered-phrase-exclusion": (True, {
        "path_prefix": "guide/", "kinds": ["md"], "sources": ["kb"], "exclude_prefixes": ["old/"],
        "tags_any": ["clay"], "tags_all": ["clay"], "exclude_tags": ["draft"], "authors": ["ann"],
        "categories": ["craft"], "since": "2000-01-01", "until": "2100-01-01", "meta": {"lang": "en"}},
        "kb-chunks", ["porcelain"]),
    "both-legs": (True, {}, None, None),
}


@pytest.mark.parametrize("case", sorted(ROUTER_CASES))
def test_the_hybrid_statement_of_one_base_is_a_router_query(m, bases, case):
    embedded, filters, only, exclude = ROUTER_CASES[case]
    base_id = sql("SELECT base_id FROM bases WHERE name = 'kb'")[0][0]
    chunk_ids = [r[0] for r in sql("SELECT chunk_id FROM chunks WHERE base_id = %s", (base_id,))]
    params = {"base_ids": [base_id], "model": f"hash-words:{hash_embedder.DIM}",
              "query_embedding": np.ones(hash_embedder.DIM, dtype=np.float32) if embedded else None,
              "terms": query_terms("kiln glaze"), "term_weights": None, "k1": 1.2, "b": 0.75, "rrf_k": 60,
              "dense_weight": 1.0, "keyword_weight": 1.0, "leg_limit": 50, "top_k": 10,
              "asked_terms": query_terms("kiln glaze"), "only_chunks": chunk_ids if only else None,
              "exclude_terms": exclude, "restricted": False,
              # Copies collapsed (issue 20): the chunks' texts are read on the base's shard too.
              "collapse_copies": True, "leg_read": 50 * retrieval.COPIES_READ,
              **fusion.Plan(fusion="rrf", normalization="tmm", rrf_k=60, weight_sum=2.0, dense_share=0.5,
                            route_absent=0.0, route_weak=0.0, weak_ratio=0.0, fired=()).params(),
              **retrieval.Filters.from_mapping(filters).to_params()}
    with m.pool.connection() as conn:
        assert retrieval.on_citus(conn)
        statement = retrieval.hybrid_statement(True)
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + statement, params))
        rows = conn.execute(statement, params).fetchall()

    # One task on one worker, no subplan: the whole statement is sent to the worker of the base.
    assert plan.count("Task Count: 1") == 1 and "Distributed Subplan" not in plan, plan
    assert "FROM bm25_top_k(" not in statement and "posting_blocks" in statement
    if not filters:
        assert rows and rows[0][0] in {r.chunk_id for r in m.search("kb", "kiln glaze", mode="keyword").results}
    # With the functions' calls, their own statements would run distributed from a shard (or be planned
    # generically, bm25_chunk_scores): Citus refuses, and the seam says so (metis never sends that form).
    assert "FROM bm25_top_k(" in retrieval.hybrid_statement(False)
    with pytest.raises(metis_pg.DatabaseUnsupported,
                       match="distributed query from a query on a shard|could not create distributed plan"):
        with m.pool.connection() as conn:
            conn.execute(retrieval.hybrid_statement(False), params).fetchall()


def test_a_search_over_two_bases_equals_one_statement_per_base_fused(m, bases):
    both = m.search(["kb", "harbour"], "kiln harbour lantern", top_k=6)
    keyword = m.search(["kb", "harbour"], "kiln", mode="keyword", top_k=10)
    alone = {r.chunk_id: r.scores.keyword for name in ("kb", "harbour")
             for r in m.search(name, "kiln", mode="keyword").results}

    assert {r.base for r in both.results} == {"kb", "harbour"}
    assert sorted(r.scores.dense_rank for r in both.results if r.scores.dense_rank) == \
        list(range(1, 1 + sum(1 for r in both.results if r.scores.dense_rank)))
    assert {r.chunk_id for r in keyword.results} == set(alone)  # each base keeps its own BM25 statistics
    for r in keyword.results:
        assert r.scores.keyword == pytest.approx(alone[r.chunk_id], abs=1e-9)


def test_compare_and_evaluate_run_on_citus(m, bases, tmp_path):
    compared = m.compare("kb", "cider press October", top_k=2)
    assert compared.passages and compared.passages[0].citation.document == "orchard.md"

    eval_set = tmp_path / "set.json"
    eval_set.write_text(json.dumps({"name": "kb-eval", "queries": [
        {"id": "q1", "question": "glaze firing day", "relevant": ["kiln.txt"]},
        {"id": "q2", "question": "copper apples", "relevant": ["orchard.md"]}]}))
    report = m.evaluate("kb", eval_set, modes=["keyword", "hybrid"], top_k=10)
    assert report.queries == 2 and report.mode("keyword").overall.recall_at_10 == 1.0


def test_reindexing_and_deletes_keep_the_statistics_exact(m, hash_url, tmp_path):
    folder = write_corpus(tmp_path / "re", KILN)
    m.create_base("re", embedding_model="hash-words", embedding_url=hash_url, embedding_dim=hash_embedder.DIM)
    m.index("re", folder)
    (folder / "kiln.txt").write_text("The kiln is cold in August: no firing.")
    (folder / "gone.txt").unlink()
    second = m.index("re", folder)
    gone = m.search("re", "lighthouse keeper", mode="keyword")
    august = m.search("re", "kiln August", mode="keyword")
    base_id = sql("SELECT base_id FROM bases WHERE name = 're'")[0][0]
    totals = sql("SELECT chunk_count, term_total FROM bm25_totals WHERE base_id = %s", (base_id,))[0]
    actual = sql("SELECT count(*), sum(term_count) FROM chunks WHERE base_id = %s", (base_id,))[0]
    m.drop_base("re")

    assert (second.changed, second.deleted) == (1, 1)
    assert "gone.txt" not in [r.citation.document for r in gone.results]
    assert august.results[0].citation.document == "kiln.txt" and "August" in august.results[0].text
    assert tuple(totals) == (actual[0], int(actual[1]))
    assert sql("SELECT count(*) FROM documents WHERE base_id = %s", (base_id,)) == [(0,)]


def test_notes_and_facts(m, bases, hash_url):
    note = m.add_note("kb", "Pier", "The pier lamp is green.")
    listed = m.notes("kb")
    found = m.search("kb", "pier lamp green", mode="keyword", filters={"sources": ["metis-kb"]})
    m.delete_note("kb", note)
    m.create_base("mem", kind="memory", embedding_model="hash-words", embedding_url=hash_url,
                  embedding_dim=hash_embedder.DIM)
    old = m.remember("mem", "Ana leads the kiln team.", key="ana/role")
    new = m.remember("mem", "Ana leads the orchard team.", key="ana/role")
    facts = m.facts("mem")
    remembered = m.search("mem", "Ana team", mode="keyword")
    m.drop_base("mem")  # the replaced fact and its replacement go in one statement

    assert [(n.note_id, n.text) for n in listed] == [(note, "The pier lamp is green.")]
    assert found.results[0].citation.document.startswith("notes/")
    assert m.notes("kb") == []
    assert [(f.fact_id, f.holds, f.superseded_by) for f in facts] == [(old, False, new), (new, True, None)]
    assert remembered.results[0].holds is True


def test_get_ls_and_status(m, bases):
    docs = m.documents("kb")
    text = m.get("kb", "kiln.txt")
    sources = m.sources("kb")

    assert [d.document for d in docs] == sorted(KILN)
    assert "bisque firing" in text[0].text
    assert [s.documents for s in sources] == [len(KILN)]
    status = run_cli("status", "--dsn", URL)
    ls = run_cli("ls", "kb", "--dsn", URL)
    got = run_cli("get", "kb", "orchard.md", "--dsn", URL)
    assert status.code == 0 and "kb" in status.stdout and "harbour" in status.stdout, status.stderr
    assert ls.code == 0 and "kiln.txt" in ls.stdout, ls.stderr
    assert got.code == 0 and "copper apples" in got.stdout, got.stderr


def test_the_cli_searches_one_base_and_several(bases):
    one = run_cli("search", "kb", "glaze firing", "--json", "--dsn", URL)
    several = run_cli("search", "kb,harbour", "kiln", "--mode", "keyword", "--json", "--dsn", URL)

    assert one.code == 0, one.stderr
    assert one.json()["results"][0]["citation"]["document"] == "kiln.txt"
    assert several.code == 0, several.stderr
    assert {r["base"] for r in several.json()["results"]} == {"kb", "harbour"}


def test_the_search_count_and_the_analyst_views(m, bases):
    m.search("kb", "copper apples", mode="keyword")
    per_day = sql("SELECT sum(searches) FROM metis.searches_per_day WHERE base = 'kb'")[0][0]
    health = dict((r[0], r[1:]) for r in sql("SELECT base, status, documents, chunks FROM metis.base_health_v3"))
    cited = sql("SELECT document, text FROM metis.chunk_citations_v3 WHERE base = 'kb' ORDER BY chunk_id")
    latest = sql("SELECT document, page_label FROM metis.chunk_citations_v5 WHERE base = 'kb' ORDER BY chunk_id")
    postings = sql("SELECT count(*) FROM metis.postings_v2 WHERE base = 'kb' AND term = 'kiln'")[0][0]

    assert per_day >= 1
    assert health["kb"][:2] == ("ready", len(KILN))
    assert {d for d, _ in cited} == set(KILN)
    assert {d for d, _ in latest} == set(KILN) and {label for _, label in latest} == {None}
    assert postings >= 2


def test_a_statement_citus_refuses_is_a_metis_error(m, bases):
    # Version 1 of the view joins chunks and documents on document_id alone: Citus refuses it.
    with pytest.raises(metis_pg.DatabaseUnsupported, match="cannot run this statement"):
        with m.pool.connection() as conn:
            conn.execute("SELECT * FROM metis.base_health").fetchall()
    with db.Pool(URL, settings=Settings()) as pool, pytest.raises(metis_pg.MetisError):
        with pool.connection() as conn:
            conn.execute("SELECT c.chunk_id FROM chunks AS c JOIN documents AS d ON d.document_id = c.document_id"
                         " WHERE c.chunk_id < 0 OR d.document_id IN (SELECT document_id FROM chunks LIMIT 1)")


def test_dropping_a_base_removes_its_rows_from_every_shard(m, hash_url, tmp_path):
    m.create_base("tmp", embedding_model="hash-words", embedding_url=hash_url, embedding_dim=hash_embedder.DIM)
    m.index("tmp", write_corpus(tmp_path / "t", {"a.txt": "A temporary base about gannets."}))
    base_id = sql("SELECT base_id FROM bases WHERE name = 'tmp'")[0][0]
    m.drop_base("tmp")

    left = sql("SELECT (SELECT count(*) FROM documents WHERE base_id = %(b)s) + (SELECT count(*) FROM chunks"
               " WHERE base_id = %(b)s) + (SELECT count(*) FROM embeddings WHERE base_id = %(b)s)"
               " + (SELECT count(*) FROM posting_blocks WHERE base_id = %(b)s)", {"b": base_id})
    assert left == [(0,)]


def test_the_live_status_is_read_on_the_coordinator(m, bases):
    # base_state reads the indexers' advisory locks, held on the coordinator: a statement sent
    # whole to a worker would never see them (bases/health.sql reads reference tables only).
    from metis_pg import storage

    base_id = sql("SELECT base_id FROM bases WHERE name = 'harbour'")[0][0]
    sql("UPDATE bases SET status = 'indexing' WHERE base_id = %s", (base_id,))
    try:
        with storage.indexer_session(m.pool, base_id):
            live = m.base("harbour").status
            listed = {b.name: b.status for b in m.list_bases()}["harbour"]
            with m.pool.connection() as conn:
                health = storage.list_bases_light(conn, [base_id])
        after = m.base("harbour")
    finally:
        sql("UPDATE bases SET status = 'ready' WHERE base_id = %s", (base_id,))

    assert (live, listed, health[0]["status"]) == ("indexing", "indexing", "indexing")
    assert health[0]["chunks"] == len(HARBOUR)
    assert (after.status, after.interrupted) == ("ready", True)  # the indexer is gone, nothing left to embed


def test_why_a_chunk_has_no_vector_is_noted_on_the_workers(m, tmp_path):
    # vector_notes (migration 0018), distributed with the others: a refused text and a model that is down.
    refuse = "POISONED"
    state = {"down": False, "refused_sent": 0}

    def respond(path: str, body):
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        state["refused_sent"] += sum(refuse in t for t in texts)
        if state["down"]:
            return 500, {"error": "down"}
        if any(refuse in t for t in texts):
            return 413, {"error": {"code": "TEXT_TOO_LONG", "message": "refused"}}
        return openai_embeddings(body, 64)

    service = FakeService(respond)
    try:
        m.create_base("noted", embedding_model="test-embed", embedding_url=service.url, embedding_dim=64)
        folder = write_corpus(tmp_path / "noted", {
            "a.txt": "Gannets nest on the cliffs.", "b.txt": f"A {refuse} text the model refuses.",
            "c.txt": "Puffins dig burrows."})
        first = m.index("noted", folder)
        sent = state["refused_sent"]
        again = m.index("noted", folder)  # the refused text is not sent again
        refused = m.base("noted").without_vector_by_reason
        state["down"] = True
        (folder / "d.txt").write_text("Terns dive for sand eels.", encoding="utf-8")
        down = metis_pg.Metis(m.dsn, pool=m.pool, settings=Settings()).index("noted", folder)
        by_reason = m.base("noted").without_vector_by_reason
        status = run_cli("status", "noted", "--dsn", URL)
    finally:
        service.close()
        m.drop_base("noted")

    assert first.chunks_without_vector == 1 and again.chunks_without_vector == 1
    assert state["refused_sent"] == sent and refused["refused"] == 1
    assert down.chunks_without_vector == 2 and by_reason == {"refused": 1, "model_unavailable": 1,
                                                             "not_embedded_yet": 0}
    assert status.code == 0 and "1 refused by the embedding model" in status.stdout, status.stdout


def test_phrases_exclusions_metadata_filters_and_per_document_search(m, bases):
    phrase = m.search("kb", '"glaze firing"', mode="keyword")
    excluded = m.search("kb", "kiln -porcelain", mode="hybrid")
    dated = m.search("kb", "kiln", filters={"since": "2000-01-01", "exclude_prefixes": ["guide/"]})
    per_document = m.search("kb", "clay kiln", per_document=True, top_k=2)
    compound = m.search("kb", "stone", mode="keyword")  # in no chunk: its compound stoneware is searched

    assert [r.citation.document for r in phrase.results] == ["kiln.txt"]
    assert "kiln.txt" in {r.citation.document for r in excluded.results}
    assert not any("porcelain" in r.text.lower() for r in excluded.results)
    assert dated.results and not any(r.citation.document.startswith("guide/") for r in dated.results)
    documents = [r.citation.document for r in per_document.results]
    assert len(documents) == len(set(documents)) and "guide/clay.md" in documents
    assert [r.citation.document for r in compound.results] == ["guide/clay.md"]


def test_the_http_service_reads_the_cluster(m, bases):
    # What the console's pages read too: GET /bases, a base's status, searches.
    from fastapi.testclient import TestClient

    from metis_pg.service.app import create_app

    with TestClient(create_app(m, tokens=""), base_url="http://127.0.0.1") as client:
        found = client.post("/search", json={"bases": ["kb", "harbour"], "question": "kiln", "mode": "hybrid"})
        listed = client.get("/bases")
        status = client.get("/bases/kb/status")
        health = client.get("/healthz")

    assert found.status_code == 200 and {r["base"] for r in found.json()["results"]} == {"kb", "harbour"}, found.text
    assert listed.status_code == 200 and {"kb", "harbour"} <= {b["name"] for b in listed.json()["bases"]}
    assert status.status_code == 200 and status.json()["documents"] == len(KILN), status.text
    assert health.status_code == 200, health.text


@pytest.mark.parametrize("statement", ["search/phrase_chunks", "search/compound_expand",
                                       "search/filtered_documents", "citus/complete_scores"])
def test_the_other_statements_of_a_search_of_one_base_are_router_queries(m, bases, statement):
    from metis_pg import sqlfiles

    base_id = sql("SELECT base_id FROM bases WHERE name = 'kb'")[0][0]
    params = {"base_ids": [base_id], "terms": ["glaze", "firing"], "term_weights": None, "k1": 1.2, "b": 0.75,
              "limit": 1000, "candidates": ["stone"], "per_term": 8, "min_rest": 4,
              **retrieval.Filters.from_mapping({"tags_any": ["clay"]}).to_params()}
    text = sqlfiles.load(statement)
    if statement == "citus/complete_scores":  # it reads the hybrid statement's legs: stand-ins of one row each
        text = ("WITH dense AS (SELECT chunk_id FROM chunks WHERE base_id = %(base_ids)s[1] LIMIT 1),"
                " keyword AS (SELECT -1::bigint AS chunk_id), scores AS (" + text.rstrip().rstrip(";") + ")"
                " SELECT * FROM scores")
    with m.pool.connection() as conn:
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + text, params))

    assert plan.count("Task Count: 1") == 1 and "Distributed Subplan" not in plan, plan


def test_a_read_on_behalf_of_principals_is_refused_on_citus(m, bases):
    # Row-level security by readers cannot exist on distributed tables (Citus refuses subqueries in
    # policies): distribute.sql drops the policies, and metis refuses such reads, never answers unfiltered.
    assert sql("SELECT count(*) FROM pg_policies WHERE tablename IN ('documents', 'chunks')") == [(0,)]
    with pytest.raises(metis_pg.DatabaseUnsupported, match="row-level security.*Citus"):
        m.search("kb", "kiln", mode="keyword", principals=["hr"])
    cli = run_cli("search", "kb", "kiln", "--mode", "keyword", "--as", "hr", "--dsn", URL)
    operator = m.search("kb", "kiln", mode="keyword")

    assert cli.code == 5 and "DATABASE_UNSUPPORTED" in cli.stderr, cli
    assert operator.results  # the operator (no principals) still reads everything


def test_watch_mode_follows_a_folder_on_the_cluster(m, hash_url, tmp_path):
    import threading
    import time

    from metis_pg.watch import Watcher, resolve_targets

    def wait_for(check, what: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}"
            time.sleep(0.2)

    def by_words(word: str) -> set[str]:
        return {r.citation.document for r in m.search("watched", word, mode="keyword").results}

    folder = write_corpus(tmp_path / "watched", {"lighthouse.txt": "Lighthouse keepers trim the wick."})
    m.create_base("watched", embedding_model="hash-words", embedding_url=hash_url, embedding_dim=hash_embedder.DIM)
    m.index("watched", folder)
    watcher = Watcher(m, resolve_targets(m, "watched", []), debounce_ms=300, heartbeat_s=1.0, retry_s=0.5)
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: watcher.runs >= 1, "the catch-up run")
        (folder / "fog.txt").write_text("Foghorns sound every thirty seconds.", encoding="utf-8")
        wait_for(lambda: by_words("foghorns") == {"fog.txt"}, "a new file found by words")
        (folder / "lighthouse.txt").unlink()
        wait_for(lambda: "lighthouse.txt" not in {d.document for d in m.documents("watched")}, "a deleted file")
        watching = m.base("watched").watched
    finally:
        watcher.stop()
        thread.join(timeout=30)
        m.drop_base("watched")

    assert watching and not thread.is_alive()


def test_field_weights_and_re_tokenizing_a_base_on_the_cluster(m, hash_url, tmp_path):
    # Issue 20's fields: heading-path words weigh field_weight times in BM25 (index time); a base whose
    # spec asks for another weight than its postings were made with is re-tokenized by the next index.
    corpus = {
        "leave.md": "# Handbook\n\n## Vacation\n\nEmployees ask their manager two weeks ahead. The request names"
                    " the first and last day, and the manager answers within three working days.\n",
        "travel.md": "# Travel\n\nBook trains through the portal. A vacation rental is never reimbursed.\n",
        "other.md": "# Printers\n\nThe printer on the second floor prints again.\n",
    }
    folder = write_corpus(tmp_path / "fields", corpus)
    m.create_base("fields", embedding_model="hash-words", embedding_url=hash_url, embedding_dim=hash_embedder.DIM,
                  field_weight=1)
    try:
        m.index("fields", folder)
        flat = m.search("fields", "vacation", mode="keyword").results[0].citation.document
        sql("UPDATE bases SET spec = (spec - 'field_weight') || '{\"tokenizer_version\": 1, \"field_weight\": 3}'"
            " WHERE name = 'fields'")
        again = m.index("fields", folder)
        weighted = m.search("fields", "vacation", mode="keyword")
    finally:
        m.drop_base("fields")

    assert flat == "travel.md"
    assert (again.changed, again.chunks_embedded) == (3, 0)  # re-tokenized, every vector reused
    assert weighted.results[0].citation.document == "leave.md" and weighted.warnings == ()
