"""Reranking (SPEC F8, F9, F14): the reranker's order, how many candidates it reads, skipping it, losing it.

The reranker is a real HTTP server on 127.0.0.1 (Cohere's ``/v1/rerank`` shape)
that scores each passage by a hidden order the test knows; the embedding
service answers hashed vectors at once, so 60 documents index in seconds.
Reranking applies in every mode.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import metis_pg
from cli_runner import run_cli
from metis_pg.api import rerank_candidates
from metis_pg.chunking import embedding_text
from model_servers import FAILURES, FakeService, embedding_service

DOCS = 60
TIMEOUT_S = 0.5
SLACK_S = 1.0
QUESTION = "lighthouse keeper harbour inventory"
ITEM = re.compile(r"logged item (\d+) ")


def hidden_score(item: int) -> float:
    """The reranker's secret: a permutation of 0..60 unrelated to words or vectors."""
    return ((item * 37) % 61) / 61


def item_of(text: str) -> int:
    return int(ITEM.search(text).group(1))


def rerank_by_hidden_order(path: str, body: Any) -> tuple[int, Any]:
    scored = [{"index": i, "relevance_score": hidden_score(item_of(d))} for i, d in enumerate(body["documents"])]
    scored.sort(key=lambda r: -r["relevance_score"])
    return 200, {"results": scored[: body.get("top_n") or len(scored)]}


def write_items(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        words = " ".join(["harbour"] * (1 + i % 4))  # keyword scores differ from item to item
        (folder / f"item{i:02d}.txt").write_text(
            f"Note {i}: the lighthouse keeper logged item {i} of the {words} inventory.", encoding="utf-8"
        )
    return folder


def item_ids(answer: metis_pg.SearchResponse) -> list[int]:
    return [item_of(r.text) for r in answer.results]


def received_items(reranker: FakeService) -> list[list[int]]:
    """Items of the documents of each rerank request, in the order they were sent."""
    return [[item_of(d) for d in body["documents"]] for body in reranker.bodies("/v1/rerank")]


@pytest.fixture(scope="module")
def services():
    embedder = FakeService(embedding_service(16))
    reranker = FakeService(rerank_by_hidden_order)
    yield embedder, reranker
    embedder.close()
    reranker.close()


@pytest.fixture(scope="module")
def items_base(metis, services, tmp_path_factory):
    """A base of 60 one-chunk documents with an embedding service and the hidden-order reranker."""
    embedder, reranker = services
    name = f"t-rerank-{uuid.uuid4().hex[:8]}"
    metis.create_base(name, embedding_model="test-embed", embedding_url=embedder.url, embedding_dim=16,
                      reranker_model="test-rerank", reranker_url=reranker.url, model_timeout_s=5.0)
    report = metis.index(name, write_items(tmp_path_factory.mktemp("items"), DOCS))
    assert (report.new, report.chunks, report.status) == (DOCS, DOCS, "ready")
    yield name
    metis.drop_base(name)


@pytest.fixture()
def reranker(services) -> FakeService:
    """The hidden-order reranker, with no request recorded yet."""
    _, service = services
    service.respond = rerank_by_hidden_order
    service.requests.clear()
    return service


def test_candidates_are_3x_top_k_at_least_20_at_most_50():
    assert [rerank_candidates(k) for k in (1, 5, 7, 10, 16, 17, 20, 100)] == [20, 20, 21, 30, 48, 50, 50, 50]


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "dense"])
@pytest.mark.parametrize(("top_k", "candidates"), [(5, 20), (10, 30), (20, 50)])
def test_the_reranker_reads_the_best_fused_candidates(metis, items_base, reranker, mode, top_k, candidates):
    answer = metis.search(items_base, QUESTION, mode=mode, top_k=top_k)
    assert answer.reranked is True and len(answer.results) == top_k
    sent = received_items(reranker)
    assert len(sent) == 1 and len(sent[0]) == candidates
    # The best fused passages, in the fused order. Without a reranker the same
    # search returns the first top_k of that order (its legs keep max(50, 4 x top_k)).
    fused = metis.search(items_base, QUESTION, mode=mode, top_k=top_k, rerank=False)
    assert sent[0][:top_k] == item_ids(fused)
    if mode != "hybrid":  # one leg: its order does not depend on how long the leg is
        longer = metis.search(items_base, QUESTION, mode=mode, top_k=candidates, rerank=False)
        assert sent[0] == item_ids(longer)
    body = reranker.bodies("/v1/rerank")[0]
    assert body["query"] == QUESTION and body["model"] == "test-rerank"
    # It reads a passage as the embedder did: title and headings, then the text.
    expected = [embedding_text(r.citation.title, r.citation.headings, r.text) for r in fused.results]
    assert body["documents"][:top_k] == expected


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "dense"])
def test_results_come_in_the_reranker_order_with_its_scores(metis, items_base, reranker, mode):
    answer = metis.search(items_base, QUESTION, mode=mode, top_k=10)
    (sent,) = received_items(reranker)
    expected = sorted(sent, key=hidden_score, reverse=True)[:10]
    assert item_ids(answer) == expected
    fused_order = item_ids(metis.search(items_base, QUESTION, mode=mode, top_k=10, rerank=False))
    assert item_ids(answer) != fused_order  # the reranker changed something
    assert answer.reranked is True and answer.warnings == ()
    assert answer.took.rerank > 0
    for r in answer.results:
        assert r.score == r.scores.rerank == pytest.approx(hidden_score(item_of(r.text)))
        assert r.scores.fused is not None
    data = answer.to_dict()
    assert data["reranked"] is True
    assert all(r["score"] == r["scores"]["rerank"] for r in data["results"])


def test_a_top_k_over_50_gets_every_result_the_rest_in_fused_order(metis, items_base, reranker):
    answer = metis.search(items_base, QUESTION, top_k=55)
    fused = item_ids(metis.search(items_base, QUESTION, top_k=55, rerank=False))
    assert len(answer.results) == len(fused) == 55
    (sent,) = received_items(reranker)
    assert sent == fused[:50]
    assert answer.reranked is True
    assert item_ids(answer)[:50] == sorted(sent, key=hidden_score, reverse=True)
    assert item_ids(answer)[50:] == fused[50:]
    assert all(r.scores.rerank is None and r.score == r.scores.fused for r in answer.results[50:])


def test_compare_keeps_the_fused_tail_past_the_reranked_50(metis, items_base, reranker):
    answer = metis.search(items_base, QUESTION, top_k=55)
    compared = metis.compare(items_base, QUESTION, top_k=55)
    ranked = sorted((p for p in compared.passages if p.hybrid_rank), key=lambda p: p.hybrid_rank)
    assert compared.reranked is True
    assert [p.chunk_id for p in ranked] == [r.chunk_id for r in answer.results]
    assert [p.hybrid_rank for p in ranked] == list(range(1, 56))


def test_equal_keyword_scores_rank_by_chunk_id_whatever_the_plan(metis, items_base):
    """Items with the same number of "harbour" score the same: chunk_id breaks the tie, before and after ANALYZE.

    (sum() adds a chunk's terms in the plan's order; unrounded, equal scores
    differed in the last bit and the order changed once statistics did.)
    """
    def keyword_order() -> list[tuple[float, int]]:
        answer = metis.search(items_base, QUESTION, mode="keyword", top_k=DOCS, rerank=False)
        assert len(answer.results) == DOCS
        return [(r.scores.keyword, r.chunk_id) for r in answer.results]

    before = keyword_order()
    assert len({score for score, _ in before}) == 4  # four groups of equal scores
    assert before == sorted(before, key=lambda sc: (-sc[0], sc[1]))
    with metis.pool.connection() as conn:
        conn.execute("ANALYZE posting_blocks, block_lengths, bm25_terms, bm25_totals, documents, sources")
    assert keyword_order() == before


def test_rerank_false_skips_the_reranker(metis, items_base, reranker):
    answer = metis.search(items_base, QUESTION, top_k=10, rerank=False)
    assert reranker.requests == []
    assert answer.reranked is False and answer.warnings == () and answer.took.rerank == 0.0
    assert len(answer.results) == 10
    assert all(r.scores.rerank is None and r.score == r.scores.fused for r in answer.results)
    fused = [r.scores.fused for r in answer.results]
    assert fused == sorted(fused, reverse=True)


def test_cli_no_rerank_skips_the_reranker(dsn, metis, items_base, reranker):
    result = run_cli("search", items_base, QUESTION, "--top-k", "5", "--no-rerank", "--json", "--dsn", dsn)
    assert result.code == 0, result.stderr
    assert reranker.requests == []
    data = result.json()
    assert data["reranked"] is False and len(data["results"]) == 5
    assert all("rerank" not in r["scores"] for r in data["results"])
    want = metis.search(items_base, QUESTION, top_k=5, rerank=False)
    assert [r["chunk_id"] for r in data["results"]] == [r.chunk_id for r in want.results]


def test_cli_shows_the_reranker_score_under_each_result(dsn, items_base, reranker):
    result = run_cli("search", items_base, QUESTION, "--top-k", "5", "--dsn", dsn)
    assert result.code == 0, result.stderr
    assert len(received_items(reranker)) == 1
    # The fused score: convex by default (issue 20), in [0, 1].
    lines = [line for line in result.stdout.splitlines() if " · fused " in line]
    assert len(lines) == 5
    assert all(re.search(r" · fused [01]\.\d{4} · reranker [01]\.\d{3}$", line) for line in lines), lines
    assert re.search(r"^hybrid( · routed \([a-z_, ]+: dense share \d\.\d\d\))? · reranked", result.stdout, re.M)


# -- a reranker that fails: fused order, with a warning ---------------------------

#: How each failure is named in the warning.
FAILURE_SAYS = {
    "hang": f"no answer within {TIMEOUT_S} s",
    "refused": "could not connect",
    "http500": "answered HTTP 500",
    "malformed": "answered something that is not JSON",
    "unscored": "gave no score for document(s) 0",
}


@pytest.mark.parametrize("failure", list(FAILURE_SAYS))
def test_a_failing_reranker_leaves_the_fused_order_with_a_warning(metis, base_name, tmp_path, failure):
    embedder = FakeService(embedding_service(16))
    reranker = FakeService(rerank_by_hidden_order)
    try:
        metis.create_base(base_name, embedding_model="test-embed", embedding_url=embedder.url, embedding_dim=16,
                          reranker_model="test-rerank", reranker_url=reranker.url, model_timeout_s=TIMEOUT_S)
        metis.index(base_name, write_items(tmp_path / "items", 8))
        if failure == "refused":
            reranker.close()
        elif failure == "unscored":
            reranker.respond = lambda path, body: (200, {"results": [{"index": 1, "relevance_score": 0.5}]})
        else:
            reranker.respond = FAILURES[failure]
        fused = metis.search(base_name, QUESTION, top_k=5, rerank=False)
        started = time.monotonic()
        answer = metis.search(base_name, QUESTION, top_k=5)
        assert time.monotonic() - started <= TIMEOUT_S + SLACK_S
        assert answer.took.total <= (TIMEOUT_S + SLACK_S) * 1000
        assert answer.reranked is False
        assert [r.chunk_id for r in answer.results] == [r.chunk_id for r in fused.results]
        assert all(r.scores.rerank is None and r.score == r.scores.fused for r in answer.results)
        assert [w.code for w in answer.warnings] == ["FUSED_ORDER"]
        message = answer.warnings[0].message
        assert message.startswith("reranker 'test-rerank' at http://127.0.0.1:"), message
        assert FAILURE_SAYS[failure] in message
        assert message.endswith(": results in the fused order")
    finally:
        embedder.close()
        reranker.close()


def test_a_base_smaller_than_the_candidate_count_sends_every_chunk(metis, base_name, tmp_path):
    embedder = FakeService(embedding_service(16))
    reranker = FakeService(rerank_by_hidden_order)
    try:
        metis.create_base(base_name, embedding_model="test-embed", embedding_url=embedder.url, embedding_dim=16,
                          reranker_model="test-rerank", reranker_url=reranker.url, model_timeout_s=5.0)
        metis.index(base_name, write_items(tmp_path / "items", 8))
        answer = metis.search(base_name, QUESTION, top_k=5)
        (sent,) = received_items(reranker)
        assert sorted(sent) == list(range(8))
        assert item_ids(answer) == sorted(range(8), key=hidden_score, reverse=True)[:5]
    finally:
        embedder.close()
        reranker.close()


def test_a_hanging_reranker_is_skipped_after_3_timeouts_and_the_warning_says_so(metis, base_name, tmp_path):
    embedder = FakeService(embedding_service(16))
    reranker = FakeService(FAILURES["hang"])
    try:
        metis.create_base(base_name, embedding_model="test-embed", embedding_url=embedder.url, embedding_dim=16,
                          reranker_model="test-rerank", reranker_url=reranker.url, model_timeout_s=TIMEOUT_S)
        metis.index(base_name, write_items(tmp_path / "items", 8))
        for _ in range(3):
            answer = metis.search(base_name, QUESTION, top_k=5)
            assert f"no answer within {TIMEOUT_S} s" in answer.warnings[0].message
        started = time.monotonic()
        answer = metis.search(base_name, QUESTION, top_k=5)
        assert time.monotonic() - started < TIMEOUT_S  # the reranker was not waited for
        assert [w.code for w in answer.warnings] == ["FUSED_ORDER"] and answer.reranked is False
        message = answer.warnings[0].message
        assert message.startswith(f"reranker 'test-rerank' at {reranker.url}/v1/rerank: skipped for "), message
        assert message.endswith(f" s after 3 failures (last: no answer within {TIMEOUT_S} s): results in the fused order")
        assert len(reranker.requests) == 3
    finally:
        embedder.close()
        reranker.close()
