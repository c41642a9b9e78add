"""Searches that keep working when the embedding model does not answer (SPEC F9, F14, F21).

Every model here is a real HTTP server on 127.0.0.1 started by the test: the
local Eos server with the bundled model, or a service whose failure the test
chooses (no answer, connection refused, HTTP 500, malformed JSON, another
dimension). Timeouts are 0.5 s, so a failing search ends within 1.5 s.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import metis_pg
from cli_runner import run_cli
from corpus import write_corpus
from model_servers import FAILURES, EosServer, FakeService, embedding_service, free_port, hashed_vector

TIMEOUT_S = 0.5
#: A failing model may cost a search its timeout, plus this at most.
SLACK_S = 1.0

CORPUS = {
    "router.txt": "Reset the router using the red button for ten seconds.",
    "gateway.txt": "How to restore factory defaults on your network gateway.",
    "modem.txt": "Error E4021 means the modem failed to authenticate.\n\nCall support if the modem keeps failing.",
    "billing.md": "# Billing\n\n## Invoices\n\nThe account portal lists every invoice of the year.",
    "orders.txt": "Purchase order PO-2231 was approved on Monday. Purchase orders need two signatures.",
    "pool.md": "# Database\n\nSet db.max_pool_size to 20 when the router reports timeouts.\n",
}

#: How each failure is named in the warning and the error (what happened).
FAILURE_SAYS = {
    "hang": f"no answer within {TIMEOUT_S} s",
    "refused": "could not connect",
    "http500": "answered HTTP 500",
    "malformed": "answered something that is not JSON",
    "wrong_dim": "the base expects 384 dimensions, not 8",
}


def vectors_per_chunk(metis: metis_pg.Metis, base: str) -> dict[int, int]:
    """Return ``{chunk_id: number of embeddings rows}`` for every chunk of `base`."""
    with metis.pool.connection() as conn:
        rows = conn.execute(
            "SELECT c.chunk_id, count(e.chunk_id) FROM chunks AS c JOIN bases AS b USING (base_id)"
            " LEFT JOIN embeddings AS e ON e.chunk_id = c.chunk_id WHERE b.name = %s GROUP BY c.chunk_id",
            (base,),
        ).fetchall()
    return dict(rows)


def chunks_with_postings(metis: metis_pg.Metis, base: str) -> int:
    with metis.pool.connection() as conn:
        return conn.execute(
            "SELECT count(DISTINCT p.chunk_id) FROM metis.postings AS p WHERE p.base = %s",
            (base,),
        ).fetchone()[0]


# -- the local Eos server gives the in-process rankings ------------------------------


@pytest.fixture(scope="module")
def eos() -> EosServer:
    server = EosServer()
    yield server
    server.close()


def test_a_base_on_the_eos_server_ranks_like_the_in_process_model(metis, base_name, eos, tmp_path):
    folder = write_corpus(tmp_path / "kb", CORPUS)
    local = metis.index(base_name, folder)
    remote_name = base_name + "-eos"
    try:
        info = metis.create_base(remote_name, embedding_model="multilingual-e5-small", embedding_url=eos.url,
                                 embedding_dim=384, model_timeout_s=30.0)
        assert (info.spec["query_prefix"], info.spec["passage_prefix"]) == ("query: ", "passage: ")
        remote = metis.index(remote_name, folder)
        assert local.status == remote.status == "ready"
        assert local.chunks == remote.chunks == remote.chunks_embedded == len(CORPUS)
        questions = ["what does the modem error code mean?", "reset the router", "where are my invoices?"]
        for mode in ("dense", "hybrid"):
            for question in questions:
                want = metis.search(base_name, question, mode=mode, top_k=len(CORPUS))
                got = metis.search(remote_name, question, mode=mode, top_k=len(CORPUS))
                assert got.warnings == () and want.warnings == ()
                assert len(got.results) == len(want.results) == len(CORPUS)
                assert [r.citation.document for r in got.results] == [r.citation.document for r in want.results]
                for g, w in zip(got.results, want.results):
                    assert g.scores.dense == pytest.approx(w.scores.dense, abs=2e-3)  # halfvec storage
                    assert g.scores.dense_rank == w.scores.dense_rank
                    assert g.scores.keyword_rank == w.scores.keyword_rank
        answer = metis.search(remote_name, "what does the modem error code mean?", mode="dense", top_k=1)
        assert answer.results[0].citation.document == "modem.txt"
    finally:
        metis.drop_base(remote_name)


# -- each way an embedding service fails -------------------------------------------


@pytest.fixture(params=list(FAILURE_SAYS))
def failing_base(request, metis, base_name, tmp_path):
    """A base indexed with a working embedding service that then fails as the parameter says.

    Yields (base name, failure).
    """
    service = FakeService(embedding_service(384))
    try:
        metis.create_base(base_name, embedding_model="test-embed", embedding_url=service.url,
                          embedding_dim=384, model_timeout_s=TIMEOUT_S)
        report = metis.index(base_name, write_corpus(tmp_path / "kb", CORPUS))
        assert report.status == "ready" and report.chunks_embedded == len(CORPUS)
        failure = request.param
        if failure == "refused":
            service.close()
        elif failure == "wrong_dim":
            service.respond = embedding_service(8)
        else:
            service.respond = FAILURES[failure]
        yield base_name, failure
    finally:
        service.close()


def test_hybrid_search_answers_by_keywords_when_the_embedding_model_fails(metis, failing_base):
    base, failure = failing_base
    answer = metis.search(base, "router reset red button", top_k=3)
    assert answer.mode == "hybrid" and answer.reranked is False
    assert answer.took.total <= (TIMEOUT_S + SLACK_S) * 1000
    assert [w.code for w in answer.warnings] == ["KEYWORD_ONLY"]
    message = answer.warnings[0].message
    assert message.startswith("embedding model 'test-embed' at http://127.0.0.1:"), message
    assert FAILURE_SAYS[failure] in message
    assert message.endswith(": results by keywords only")
    # Only the words find passages: the two holding "router", best first.
    assert [r.citation.document for r in answer.results] == ["router.txt", "pool.md"]
    for r in answer.results:
        assert r.scores.dense is None and r.scores.dense_rank is None
        assert r.scores.keyword is not None and r.score == r.scores.fused


def test_dense_search_is_refused_when_the_embedding_model_fails(metis, failing_base):
    base, failure = failing_base
    started = time.monotonic()
    with pytest.raises(metis_pg.EmbeddingModelUnavailable) as caught:
        metis.search(base, "router reset red button", mode="dense")
    assert time.monotonic() - started <= TIMEOUT_S + SLACK_S
    assert caught.value.code == "EMBEDDING_MODEL_UNAVAILABLE"
    assert (caught.value.exit_code, caught.value.http_status) == (3, 503)
    assert caught.value.message.startswith("embedding model 'test-embed' at http://127.0.0.1:")
    assert FAILURE_SAYS[failure] in caught.value.message


def test_keyword_search_works_without_a_warning_when_the_embedding_model_fails(metis, failing_base):
    base, _ = failing_base
    answer = metis.search(base, "PO-2231", mode="keyword", top_k=3)
    assert answer.warnings == ()
    assert answer.results[0].citation.document == "orders.txt"
    assert answer.took.embed == 0.0  # the model was not called, so not waited for
    assert all(r.scores.dense is None and r.scores.keyword is not None for r in answer.results)


def test_cli_dense_search_exits_3_with_the_error_code_in_json(dsn, failing_base):
    base, failure = failing_base
    result = run_cli("search", base, "router reset", "--mode", "dense", "--json", "--dsn", dsn)
    assert result.code == 3
    error = result.json()["error"]
    assert error["code"] == "EMBEDDING_MODEL_UNAVAILABLE"
    assert FAILURE_SAYS[failure] in error["message"]


def test_cli_dense_search_error_is_one_line(dsn, failing_base):
    base, failure = failing_base
    result = run_cli("search", base, "router reset", "--mode", "dense", "--dsn", dsn)
    assert result.code == 3
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error [EMBEDDING_MODEL_UNAVAILABLE]: embedding model 'test-embed' at ")
    assert FAILURE_SAYS[failure] in lines[0]


def test_cli_hybrid_search_prints_the_warning_and_keyword_results(dsn, failing_base):
    base, _ = failing_base
    result = run_cli("search", base, "router reset red button", "--dsn", dsn)
    assert result.code == 0, result.stderr
    warning = result.stderr.splitlines()  # on stderr: `| head -1` is the first result
    assert len(warning) == 1 and warning[0].startswith("warning: embedding model 'test-embed'")
    assert warning[0].endswith(": results by keywords only")
    assert result.stdout.splitlines()[0].startswith("1. router.txt:1 · ")
    assert "meaning" not in result.stdout and "words " in result.stdout


# -- indexing while the model is down: Waiting, then Ready ---------------------------


def quick_recovery(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients made from now on retry after 10 ms and try the model again at the next call after failures.

    Indexing retries each request and the failed attempts open the client's breaker
    (default 30 s): these tests check what happens once the model is back, not the waits.
    """
    monkeypatch.setenv("METIS_MODEL_RETRY_WAIT_S", "0.01")
    monkeypatch.setenv("METIS_MODEL_BREAKER_COOLDOWN_S", "0")


def test_index_while_the_model_is_down_waits_then_the_next_run_embeds_every_chunk(metis, base_name, tmp_path, monkeypatch):
    quick_recovery(monkeypatch)
    port = free_port()  # nothing listens here yet: connections are refused
    metis.create_base(base_name, embedding_model="multilingual-e5-small", embedding_url=f"http://127.0.0.1:{port}",
                      embedding_dim=384, model_timeout_s=30.0)
    files = {name: CORPUS[name] for name in ("router.txt", "modem.txt", "orders.txt")}
    folder = write_corpus(tmp_path / "kb", files)

    report = metis.index(base_name, folder)
    assert (report.new, report.chunks, report.chunks_embedded) == (3, 3, 0)
    assert (report.status, report.chunks_without_vector) == ("waiting", 3)
    assert any("could not connect" in w and "chunks stored without vectors" in w for w in report.warnings)
    info = metis.base(base_name)
    assert (info.status, info.chunks, info.chunks_without_vector) == ("waiting", 3, 3)
    before = vectors_per_chunk(metis, base_name)
    assert len(before) == 3 and set(before.values()) == {0}
    assert chunks_with_postings(metis, base_name) == 3

    answer = metis.search(base_name, "modem authenticate error", top_k=3)
    assert [w.code for w in answer.warnings] == ["KEYWORD_ONLY", "NO_VECTOR_YET"]
    assert f"no chunk of {base_name!r} has a vector yet" in answer.warnings[1].message
    assert answer.results[0].citation.document == "modem.txt"
    assert all(r.scores.dense is None for r in answer.results)
    keyword = metis.search(base_name, "PO-2231", mode="keyword")
    assert keyword.warnings == () and keyword.results[0].citation.document == "orders.txt"

    eos = EosServer(port)  # the model comes up where the base expects it
    try:
        report = metis.index(base_name, folder)
        assert (report.unchanged, report.new, report.chunks_embedded) == (3, 0, 3)
        assert (report.status, report.chunks_without_vector) == ("ready", 0)
        after = vectors_per_chunk(metis, base_name)
        assert set(after) == set(before)  # no chunk lost, none added
        assert set(after.values()) == {1}  # exactly one vector each
        assert metis.base(base_name).status == "ready"
        answer = metis.search(base_name, "what does the modem error code mean?", top_k=3)
        assert answer.warnings == ()
        assert answer.results[0].citation.document == "modem.txt"
        assert all(r.scores.dense is not None for r in answer.results)
        report = metis.index(base_name, folder)
        assert (report.unchanged, report.chunks_embedded, report.status) == (3, 0, "ready")
        assert vectors_per_chunk(metis, base_name) == after
    finally:
        eos.close()


def test_chunks_indexed_while_the_model_failed_are_found_by_words_until_embedded(metis, base_name, tmp_path, monkeypatch):
    quick_recovery(monkeypatch)
    service = FakeService(embedding_service(384))
    try:
        metis.create_base(base_name, embedding_model="test-embed", embedding_url=service.url,
                          embedding_dim=384, model_timeout_s=TIMEOUT_S)
        folder = write_corpus(tmp_path / "kb", {n: CORPUS[n] for n in ("router.txt", "gateway.txt", "billing.md")})
        assert metis.index(base_name, folder).status == "ready"

        service.respond = FAILURES["http500"]
        write_corpus(folder, {n: CORPUS[n] for n in ("modem.txt", "orders.txt")})
        report = metis.index(base_name, folder)
        assert (report.new, report.unchanged, report.chunks_embedded) == (2, 3, 0)
        assert (report.status, report.chunks_without_vector) == ("waiting", 2)

        service.respond = embedding_service(384)  # the model answers again; nothing re-indexed yet
        answer = metis.search(base_name, "PO-2231 purchase order", top_k=5)
        assert [w.code for w in answer.warnings] == ["NO_VECTOR_YET"]
        assert answer.warnings[0].message.startswith(f"2 chunks of {base_name!r} have no vector yet")
        orders = [r for r in answer.results if r.citation.document == "orders.txt"]
        assert len(orders) == 1 and orders[0].scores.dense is None and orders[0].scores.keyword_rank == 1
        assert any(r.scores.dense is not None for r in answer.results)

        report = metis.index(base_name, folder)
        assert (report.unchanged, report.chunks_embedded, report.status) == (5, 2, "ready")
        counts = vectors_per_chunk(metis, base_name)
        assert len(counts) == 5 and set(counts.values()) == {1}
        answer = metis.search(base_name, "PO-2231 purchase order", top_k=5)
        assert answer.warnings == ()
        assert answer.results[0].citation.document == "orders.txt" and answer.results[0].scores.dense is not None
    finally:
        service.close()


# -- a model that hangs costs the timeout a few times, not every search (issue 13, item 7) ----


def test_after_3_searches_waiting_for_a_hanging_model_the_next_ones_skip_it_saying_so(metis, base_name, tmp_path):
    service = FakeService(embedding_service(384))
    try:
        metis.create_base(base_name, embedding_model="test-embed", embedding_url=service.url,
                          embedding_dim=384, model_timeout_s=TIMEOUT_S)
        assert metis.index(base_name, write_corpus(tmp_path / "kb", CORPUS)).status == "ready"
        service.respond = FAILURES["hang"]
        for _ in range(3):
            answer = metis.search(base_name, "router reset red button", top_k=3)
            assert [w.code for w in answer.warnings] == ["KEYWORD_ONLY"]
            assert f"no answer within {TIMEOUT_S} s" in answer.warnings[0].message
        asked = len(service.requests)
        for _ in range(5):
            answer = metis.search(base_name, "router reset red button", top_k=3)
            assert answer.took.embed < TIMEOUT_S * 1000  # not waited for
            assert [w.code for w in answer.warnings] == ["KEYWORD_ONLY"]
            message = answer.warnings[0].message
            assert message.startswith(f"embedding model 'test-embed' at {service.url}/v1/embeddings: skipped for "), message
            assert message.endswith(f" s after 3 failures (last: no answer within {TIMEOUT_S} s): results by keywords only")
            assert [r.citation.document for r in answer.results] == ["router.txt", "pool.md"]
        assert len(service.requests) == asked  # the model was not asked again
        with pytest.raises(metis_pg.EmbeddingModelUnavailable, match="skipped for"):
            metis.search(base_name, "router reset", mode="dense")
    finally:
        service.close()


class SlowHashEmbedder:
    """Hashed-word vectors (384-d) taking ``seconds`` per text, like the bundled model on a busy machine."""

    name = "slow-hash"
    dim = 384

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        time.sleep(self.seconds * len(texts))
        rows = np.array([hashed_vector(t, self.dim) for t in texts], dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    embed_queries = embed_passages


def test_a_waiting_base_recovers_through_a_slow_eos_server(metis, base_name, tmp_path, monkeypatch):
    # issue 13: `metis eos serve` took ~25 s for the 32 passages of one request and the timeout
    # was 10 s, so each re-index of a `waiting` base timed out again: it never recovered. Here:
    # 0.06 s per text and a 1 s timeout, so 32 texts (1.9 s) cannot be answered in time, 8 can.
    quick_recovery(monkeypatch)
    port = free_port()
    metis.create_base(base_name, embedding_model="test-embed", embedding_url=f"http://127.0.0.1:{port}",
                      embedding_dim=384, model_timeout_s=1.0)
    files = {f"note{i:02d}.txt": f"Note {i} about the router, the modem and invoice {i}." for i in range(40)}
    folder = write_corpus(tmp_path / "kb", files)
    assert metis.index(base_name, folder).status == "waiting"  # nothing listens yet
    eos = EosServer(port, embedder=SlowHashEmbedder(0.06))
    try:
        report = metis.index(base_name, folder)  # the 40 chunks without a vector, in requests sized to fit
        assert (report.status, report.chunks_embedded, report.chunks_without_vector) == ("ready", 40, 0), report.warnings
    finally:
        eos.close()
