"""Complete scores, fusion functions, routing, phrases and exclusions (issue 20).

Every candidate either leg found carries its exact cosine and its exact BM25 (the statement looks
the missing one up), checked here for every result against numpy cosine of the test's own
embedder and the independent exhaustive BM25 of ``test_bm25_oracle``. The convex combinations of
``sql/search/hybrid.sql`` must order candidates exactly as :func:`metis_pg.fusion.fuse` does
(the evaluation computes them there). Phrases and exclusions filter both legs, through the
Python API, the CLI and HTTP.
"""

from __future__ import annotations

import dataclasses

import math
import uuid
from collections.abc import Iterator
from types import SimpleNamespace

import httpx
import numpy as np
import pytest

import metis_pg
from metis_pg import documents, fusion, retrieval, routing, service, storage
from metis_pg.chunking import embedding_text
from metis_pg.config import BaseSpec
from metis_pg.errors import InvalidInput
from metis_pg.tokenizer import fold, query_terms, terms

import hash_embedder
from cli_runner import run_cli
from corpus import weighted_terms, write_corpus
from test_bm25_oracle import ExhaustiveBM25

WORDS = ("router reset button modem gateway network password firmware cable light signal support "
         "billing account portal wireless channel factory default restore legacy manual admin login").split()


def _corpus() -> dict[str, str]:
    """60 short documents over a small vocabulary (both legs find many of them, and disagree), a few
    holding the phrase "reset the router" and others its words apart."""
    rng = np.random.default_rng(20)
    files = {}
    for i in range(54):
        words = rng.choice(WORDS, size=int(rng.integers(6, 30)), p=None)
        files[f"doc{i:02d}.txt"] = " ".join(words) + "."
    files["phrase1.txt"] = "To reset the router, hold the button for ten seconds."
    files["phrase2.txt"] = "Reset the Router: the legacy admin page does it too."
    files["apart1.txt"] = "Reset the modem first; the router comes later."
    files["apart2.txt"] = "The router reset button is on the back (reset the routers in the rack one by one)."
    files["legacy1.txt"] = "Legacy firmware: reset the router from the manual page."
    files["plain.txt"] = "Nothing here but words about a kitchen and a garden."
    return files


QUESTIONS = ["reset the router button", "firmware restore factory default", "wireless channel signal light",
             "legacy admin login", "billing account portal support", "kitchen"]
TOKEN = "test-token-" + "7" * 24


@pytest.fixture(scope="module")
def kb(metis: metis_pg.Metis, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    root = write_corpus(tmp_path_factory.mktemp("complete") / "kb", _corpus())
    name = f"t-complete-{uuid.uuid4().hex[:8]}"
    with hash_embedder.serve() as url:
        metis.create_base(name, embedding_model=hash_embedder.MODEL, embedding_url=url,
                          embedding_dim=hash_embedder.DIM)
        try:
            report = metis.index(name, root)
            assert report.chunks_without_vector == 0
            with metis.pool.connection() as conn:
                row = storage.get_base(conn, name)
            chunks = {c.chunk_id: (d.info.title, c.headings, c.text)
                      for d in documents.get_documents(metis.pool, row, ["*"]) for c in d.chunks}
            oracle = ExhaustiveBM25({cid: weighted_terms(*parts) for cid, parts in chunks.items()})
            vectors = {cid: hash_embedder.HashEmbedder().embed_passages([embedding_text(*parts)])[0]
                       for cid, parts in chunks.items()}
            yield SimpleNamespace(name=name, row=row, chunks=chunks, oracle=oracle, vectors=vectors, url=url)
        finally:
            metis.drop_base(name)


def _expected(kb, question: str, chunk_id: int) -> tuple[float, float]:
    """(numpy cosine, exhaustive BM25) of a chunk for a question."""
    q = hash_embedder.HashEmbedder().embed_queries([question])[0]
    v = kb.vectors[chunk_id]
    cosine = float(np.dot(q, v) / (np.linalg.norm(q) * np.linalg.norm(v)))
    row = int(np.searchsorted(kb.oracle.ids, chunk_id))
    bm25 = float(kb.oracle.all_scores(query_terms(question))[row])
    return cosine, bm25


@pytest.mark.parametrize("fusion_setting", [{}, {"fusion": "convex", "alpha": 0.5},
                                            {"fusion": "convex", "normalization": "minmax", "alpha": 0.3}])
def test_every_result_has_its_exact_cosine_and_bm25(metis, kb, fusion_setting):
    checked = found_by_one_leg = 0
    for question in QUESTIONS:
        answer = metis.search(kb.name, question, top_k=40, fusion=fusion_setting)
        assert answer.results
        for r in answer.results:
            cosine, bm25 = _expected(kb, question, r.chunk_id)
            assert r.scores.dense is not None and r.scores.keyword is not None, (question, r.scores)
            # Vectors are stored as halfvec (16-bit floats): cosine to 2e-3.
            assert r.scores.dense == pytest.approx(cosine, abs=2e-3), (question, r.chunk_id)
            assert math.isclose(r.scores.keyword, bm25, rel_tol=1e-9, abs_tol=1e-12), (question, r.chunk_id)
            found_by_one_leg += (r.scores.dense_rank is None) != (r.scores.keyword_rank is None)
            checked += 1
    assert checked > 100
    # Legs are cut at 160 here (4 x 40) on 60 chunks: every chunk is in the dense leg; the keyword
    # leg holds only chunks with a term, so the others got their BM25 (0) looked up.
    assert found_by_one_leg > 0


def test_legs_cut_short_still_give_complete_scores_and_their_own_ranks(metis, kb):
    with metis.pool.connection() as conn:
        found, _ = retrieval.run_search(
            conn, base_ids=[kb.row.base_id], model=f"{hash_embedder.MODEL}:{hash_embedder.DIM}",
            query_embedding=hash_embedder.HashEmbedder().embed_queries(["reset the router button"])[0],
            terms=query_terms("reset the router button"), top_k=100, legs_top_k=1, filters=retrieval.Filters())
    # leg_limit(1) = 50 of 60 chunks each: some chunks are kept by one leg only.
    only_dense = [c for c in found if c.keyword_rank is None]
    only_keyword = [c for c in found if c.dense_rank is None]
    assert only_dense or only_keyword
    for c in found:
        cosine, bm25 = _expected(kb, "reset the router button", c.chunk_id)
        assert c.dense == pytest.approx(cosine, abs=2e-3)
        assert math.isclose(c.keyword, bm25, rel_tol=1e-9, abs_tol=1e-12)
    assert sorted(c.dense_rank for c in found if c.dense_rank) == list(range(1, 51))
    assert sorted(c.keyword_rank for c in found if c.keyword_rank) == list(
        range(1, sum(1 for c in found if c.keyword_rank) + 1))


@pytest.mark.parametrize(("name", "normalization", "share"), [
    ("rrf", "tmm", 2 / 3), ("rrf", "tmm", 0.2), ("convex", "tmm", 0.5), ("convex", "tmm", 0.8),
    ("convex", "minmax", 0.5), ("convex", "minmax", 0.1), ("convex", "z", 0.5), ("convex", "z", 0.65),
    ("convex", "z", 0.1),
])
def test_the_statement_fuses_as_metis_pg_fusion_does(metis, kb, name, normalization, share):
    model = f"{hash_embedder.MODEL}:{hash_embedder.DIM}"
    for question in QUESTIONS:
        plan = fusion.Plan(fusion=name, normalization=normalization, rrf_k=60, weight_sum=3.0, dense_share=share,
                           route_absent=0.0, route_weak=0.0, weak_ratio=0.0, fired=())
        with metis.pool.connection() as conn:
            found, _ = retrieval.run_search(
                conn, base_ids=[kb.row.base_id], model=model,
                query_embedding=hash_embedder.HashEmbedder().embed_queries([question])[0],
                terms=query_terms(question), top_k=100, legs_top_k=1, filters=retrieval.Filters(), plan=plan)
        cands = [(c.dense, c.dense_rank, c.keyword, c.keyword_rank, c.chunk_id) for c in found]
        fused = fusion.fuse(cands, name, share, normalization=normalization, rrf_k=60, weight_sum=3.0)
        for c, f in zip(found, fused):
            assert c.fused == pytest.approx(f, abs=1e-9), (question, c.chunk_id)
        order = sorted(range(len(cands)), key=lambda i: (-fused[i], cands[i][4]))
        assert [cands[i][4] for i in order] == [c.chunk_id for c in found], question


@pytest.mark.parametrize("mode", ["hybrid", "keyword"])
def test_z_fusion_standardizes_each_score_by_its_own_legs_list(metis, kb, mode):
    """normalization z, computed here with numpy from the statement's candidates: share * (cos - mean)
    / sd + (1 - share) * (bm25 - mean) / sd, mean and population sd over the candidates that leg
    ranked, a missing score -3 (keyword mode: no cosine at all)."""
    model = f"{hash_embedder.MODEL}:{hash_embedder.DIM}"
    share = 0.65
    plan = fusion.Plan(fusion="convex", normalization="z", rrf_k=60, weight_sum=2.0, dense_share=share,
                       route_absent=0.0, route_weak=0.0, weak_ratio=0.0, fired=())
    for question in QUESTIONS:
        vector = hash_embedder.HashEmbedder().embed_queries([question])[0] if mode == "hybrid" else None
        with metis.pool.connection() as conn:
            found, _ = retrieval.run_search(
                conn, base_ids=[kb.row.base_id], model=model, query_embedding=vector, terms=query_terms(question),
                top_k=100, legs_top_k=1, filters=retrieval.Filters(), plan=plan)
        assert found, question

        def z(scores: list, ranks: list) -> np.ndarray:
            own = np.array([x for x, r in zip(scores, ranks) if r is not None and x is not None], dtype=np.float64)
            mean, sd = (own.mean(), own.std() or 1.0) if len(own) else (0.0, 1.0)
            return np.array([-3.0 if x is None else (x - mean) / sd for x in scores])

        dense, keyword = [c.dense for c in found], [c.keyword for c in found]
        if mode == "keyword":
            assert all(d is None for d in dense)
        fused = share * z(dense, [c.dense_rank for c in found]) + (1 - share) * z(keyword, [c.keyword_rank for c in found])
        assert [c.fused for c in found] == pytest.approx(list(fused), abs=1e-9), question
        order = sorted(range(len(found)), key=lambda i: (-fused[i], found[i].chunk_id))
        assert [found[i].chunk_id for i in order] == [c.chunk_id for c in found], question


def test_a_search_may_ask_for_z_and_a_base_may_keep_it(metis, kb):
    """normalization z per search (Python) is what the statement fuses with, and is echoed."""
    answer = metis.search(kb.name, "firmware restore factory default", top_k=10,
                          fusion={"fusion": "convex", "normalization": "z", "alpha": 0.65, "routing": False})
    echo = answer.to_dict()["fusion"]
    assert (echo["fusion"], echo["normalization"], echo["alpha"]) == ("convex", "z", 0.65)
    model = f"{hash_embedder.MODEL}:{hash_embedder.DIM}"
    plan = fusion.Plan(fusion="convex", normalization="z", rrf_k=60, weight_sum=2.0, dense_share=0.65,
                       route_absent=0.0, route_weak=0.0, weak_ratio=0.0, fired=())
    question = "firmware restore factory default"
    with metis.pool.connection() as conn:
        found, _ = retrieval.run_search(
            conn, base_ids=[kb.row.base_id], model=model,
            query_embedding=hash_embedder.HashEmbedder().embed_queries([question])[0], terms=query_terms(question),
            top_k=10, legs_top_k=10, filters=retrieval.Filters(), plan=plan)
    assert [r.chunk_id for r in answer.results] == [c.chunk_id for c in found]
    assert BaseSpec(normalization="z", fusion="convex").normalization == "z"
    with pytest.raises(Exception, match="normalization"):
        BaseSpec(normalization="zscore", fusion="convex")


def test_the_answer_says_which_fusion_and_route(metis, kb):
    answer = metis.search(kb.name, "firmware restore", fusion={"fusion": "convex", "normalization": "tmm", "alpha": 0.7,
                                                               "routing": False})
    echo = answer.to_dict()["fusion"]
    assert (echo["fusion"], echo["normalization"], echo["alpha"], echo["routing"]) == ("convex", "tmm", 0.7, False)
    assert echo["route"]["dense_share"] == pytest.approx(0.7) and echo["route"]["features"] == []
    shifts = {"identifier": -0.2, "phrase": -0.3}
    spec = dataclasses.replace(BaseSpec.from_json(metis.base(kb.name).spec), routing=True)  # routing is opt-in
    assert fusion.plan(spec, '"reset the router" admin_login', shifts={**routing.SHIFTS, **shifts}).fired == (
        "identifier", "phrase")
    routed = metis.search(kb.name, '"reset the router" admin_login the router page of the legacy firmware',
                          fusion={"routing": True})
    route = routed.fusion["route"]
    assert {"identifier", "phrase", "long"} <= set(route["features"])
    expected = min(1.0, max(0.0, fusion.base_share(spec) + sum(
        routing.SHIFTS[f] for f in ("identifier", "phrase", "long", "question_word") if f in route["features"])))
    assert route["dense_share"] == pytest.approx(expected)


def _folded(text: str) -> str:
    return " ".join(fold(text).replace(",", " ").replace(":", " ").split())


@pytest.mark.parametrize("mode", ["hybrid", "dense", "keyword"])
def test_a_quoted_phrase_keeps_only_chunks_holding_it_in_every_mode(metis, kb, mode):
    answer = metis.search(kb.name, '"reset the router"', mode=mode, top_k=20)
    got = {r.citation.document for r in answer.results}
    assert got == {"phrase1.txt", "phrase2.txt", "legacy1.txt"}, got
    # Words apart, or "routers", are not the phrase.
    assert not got & {"apart1.txt", "apart2.txt"}


@pytest.mark.parametrize("mode", ["hybrid", "dense", "keyword"])
def test_an_excluded_word_drops_every_chunk_holding_it(metis, kb, mode):
    answer = metis.search(kb.name, '"reset the router" -legacy', mode=mode, top_k=20)
    assert {r.citation.document for r in answer.results} == {"phrase1.txt"}
    wide = metis.search(kb.name, "router reset button -legacy -modem", mode=mode, top_k=60)
    assert wide.results
    for r in wide.results:
        held = set(terms(embedding_text(*kb.chunks[r.chunk_id])))
        assert not held & {"legacy", "modem"}, r.citation.document
    # Without the exclusions, such chunks are found.
    plain = metis.search(kb.name, "router reset button", mode=mode, top_k=60)
    assert any({"legacy", "modem"} & set(terms(embedding_text(*kb.chunks[r.chunk_id]))) for r in plain.results)


def test_a_phrase_no_chunk_holds_finds_nothing_and_says_so(metis, kb):
    answer = metis.search(kb.name, '"router the reset"')
    assert not answer.results
    assert [w.code for w in answer.warnings] == ["PHRASE_NOT_FOUND"]


def test_a_question_of_exclusions_only_is_refused_everywhere(metis, kb, dsn):
    with pytest.raises(InvalidInput, match="only excludes"):
        metis.search(kb.name, "-legacy -modem")
    # A question starting with "-" comes after "--" (else it reads as an option).
    result = run_cli("search", "--json", "--dsn", dsn, "--", kb.name, "-legacy -modem")
    assert result.code == 2, (result.stdout, result.stderr)
    assert "only excludes" in result.stderr + result.stdout
    ok = run_cli("search", kb.name, '"reset the router" -legacy', "--json", "--dsn", dsn)
    assert ok.code == 0, ok.stderr
    assert {r["citation"]["document"] for r in ok.json()["results"]} == {"phrase1.txt"}


def test_http_takes_the_same_syntax(metis, kb, tmp_path_factory):
    app = service.create_app(metis, tokens=[TOKEN], source_roots=[tmp_path_factory.mktemp("complete-root")])
    with service.running(app) as url, httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"},
                                                   timeout=60) as client:
        got = client.post("/search", json={"bases": kb.name, "question": '"reset the router" -legacy'})
        assert got.status_code == 200, got.text
        assert {r["citation"]["document"] for r in got.json()["results"]} == {"phrase1.txt"}
        refused = client.post("/search", json={"bases": kb.name, "question": "-legacy"})
        assert refused.status_code == 400 and "only excludes" in refused.text
        convex = client.post("/search", json={"bases": kb.name, "question": "router",
                                              "fusion": {"fusion": "convex", "alpha": 0.4}})
        assert convex.status_code == 200, convex.text
        assert convex.json()["fusion"]["alpha"] == 0.4
        z = client.post("/search", json={"bases": kb.name, "question": "router",
                                         "fusion": {"fusion": "convex", "normalization": "z", "alpha": 0.65}})
        assert z.status_code == 200, z.text
        assert (z.json()["fusion"]["normalization"], z.json()["fusion"]["alpha"]) == ("z", 0.65)
        bad = client.post("/search", json={"bases": kb.name, "question": "router",
                                           "fusion": {"fusion": "convex", "normalization": "zscore"}})
        assert bad.status_code == 400, bad.text
