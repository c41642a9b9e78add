"""One search pipeline for search, compare and evaluate (metis_pg.search): what the copies got wrong."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from types import SimpleNamespace

import pytest

import metis_pg
from metis_pg.snippets import snippet

import hash_embedder
from corpus import write_corpus
from model_servers import FakeService, embedding_service, free_port

# "anchor" is rare in the port, common in the fleet: each base's BM25 statistics and parameters differ.
PORT = {
    "anchor.txt": "The anchor chain of the ferry was replaced in spring.",
    "crane.txt": "The harbour crane lifts containers onto the quay.",
    "tide.txt": "Tide tables are posted at the harbour office.",
}
FLEET = {
    "tug.txt": "The tug drops anchor near the anchor buoy, anchor down.",
    "barge.txt": "A barge rides at anchor while the anchor watch sleeps.",
    "yacht.txt": "Sailing yachts anchor in the bay for the night.",
}


@pytest.fixture(scope="module")
def two_bases(metis, tmp_path_factory):
    """Two bases of one embedding model with different k1, b and rrf_k."""
    root = tmp_path_factory.mktemp("pipeline")
    tag = uuid.uuid4().hex[:8]
    names = SimpleNamespace(port=f"t-port-{tag}", fleet=f"t-fleet-{tag}")
    with hash_embedder.serve() as url:
        model = {"embedding_model": hash_embedder.MODEL, "embedding_url": url, "embedding_dim": hash_embedder.DIM}
        try:
            metis.create_base(names.port, **model)
            metis.create_base(names.fleet, **model, k1=0.4, b=0.1, rrf_k=5)
            metis.index(names.port, write_corpus(root / "port", PORT))
            metis.index(names.fleet, write_corpus(root / "fleet", FLEET))
            yield names
        finally:
            for name in vars(names).values():
                metis.drop_base(name)


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_bases_searched_together_keep_their_own_bm25_and_rrf_parameters(metis, two_bases, mode):
    both = metis.search([two_bases.port, two_bases.fleet], "anchor chain", mode=mode, top_k=6)
    alone = {}
    for name in (two_bases.port, two_bases.fleet):
        for r in metis.search(name, "anchor chain", mode=mode, top_k=6).results:
            alone[r.chunk_id] = r.scores

    assert {r.base for r in both.results} == {two_bases.port, two_bases.fleet}
    for r in both.results:
        # Scores as if each base were searched alone: the fleet's k1 = 0.4, b = 0.1, rrf_k = 5 were used.
        assert r.scores.keyword == pytest.approx(alone[r.chunk_id].keyword, abs=1e-9)
        assert r.scores.fused == pytest.approx(alone[r.chunk_id].fused, abs=1e-12)


def test_lists_of_different_rrf_k_are_merged_each_with_its_own_constant(metis, two_bases):
    both = metis.search([two_bases.port, two_bases.fleet], "anchor", mode="keyword", top_k=6)
    # Rank 1 of the fleet (rrf_k 5) scores 1/6 in the merge, rank 1 of the port (rrf_k 60) 1/61:
    # the fleet's first two come before the port's first.
    assert [r.base for r in both.results[:2]] == [two_bases.fleet, two_bases.fleet]


def test_compare_orders_facts_that_hold_first_and_keeps_the_searchs_warnings(metis, base_name):
    metis.create_base(base_name, kind="memory")
    metis.remember(base_name, "Ana works on the search team", key="ana/team")
    metis.remember(base_name, "Ana works on the billing team", key="ana/team")

    result = metis.compare(base_name, "which team does Ana work on", top_k=5,
                           filters={"sources": [f"metis-{base_name}", "no-such-source"]})
    answer = metis.search(base_name, "which team does Ana work on", top_k=5,
                          filters={"sources": [f"metis-{base_name}", "no-such-source"]})

    ranked = sorted((p for p in result.passages if p.hybrid_rank), key=lambda p: p.hybrid_rank)
    assert [p.chunk_id for p in ranked] == [r.chunk_id for r in answer.results]
    assert "billing" in ranked[0].text  # the fact that holds, whatever the legs said
    assert [w.code for w in result.warnings] == [w.code for w in answer.warnings]
    assert "UNKNOWN_SOURCE" in {w.code for w in result.warnings}


def test_compare_of_an_empty_base_says_nothing_is_indexed(metis, base_name):
    metis.create_base(base_name)
    assert [w.code for w in metis.compare(base_name, "anything").warnings] == ["NOTHING_INDEXED"]


def _count(metis, base: str) -> int:
    with metis.pool.connection() as conn:
        row = conn.execute(
            "SELECT coalesce(sum(searches), 0) FROM search_counts JOIN bases USING (base_id) WHERE name = %s", (base,)
        ).fetchone()
    return int(row[0])


def test_an_evaluation_is_not_counted_as_searches_but_a_search_is(metis, two_bases, tmp_path):
    eval_set = tmp_path / "set.json"
    eval_set.write_text('{"queries": [{"id": "q1", "question": "anchor chain",'
                        ' "relevant": [{"document": "anchor.txt"}]}]}', encoding="utf-8")
    before = _count(metis, two_bases.port)
    metis.evaluate(two_bases.port, eval_set, modes=["keyword", "hybrid"])
    assert _count(metis, two_bases.port) == before
    metis.search(two_bases.port, "anchor chain")
    assert _count(metis, two_bases.port) == before + 1


SNIPPET_SCRIPT = """
from metis_pg.snippets import snippet
text = ("Intro words here. " * 30 + "The alpha value sits far away from the start of this sentence, and then "
        + "filler " * 60 + "the omega value ends it.")
print(snippet(text, {"omega", "alpha"}))
"""


def test_a_snippet_is_the_same_in_every_process():
    outputs = set()
    for seed in ("0", "1", "2", "3", "4"):
        done = subprocess.run([sys.executable, "-c", SNIPPET_SCRIPT], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed})
        outputs.add(done.stdout)
    assert len(outputs) == 1
    assert "alpha" in outputs.pop()  # centred on the earliest term of the sentence


def test_a_snippet_centres_on_the_earliest_question_term_whatever_their_order():
    text = "word " * 10 + "alpha " + "word " * 80 + "omega " + "word " * 10
    assert snippet(text, ["omega", "alpha"]) == snippet(text, ["alpha", "omega"])


def test_close_closes_the_model_clients_http_connections(dsn, base_name):
    service = FakeService(embedding_service(16))
    m = metis_pg.Metis(dsn)
    try:
        m.create_base(base_name, embedding_model="test-embed", embedding_url=service.url, embedding_dim=16)
        spec = metis_pg.BaseSpec.from_json(m._base_row(base_name).spec)
        client = m.embedder(spec)
        m.search(base_name, "a question")
        assert client._client is not None and not client._client.is_closed
        m.close()
        assert client._client is None
    finally:
        service.close()
        with metis_pg.Metis(dsn) as other:
            other.drop_base(base_name)


def test_a_model_name_served_at_two_urls_is_embedded_at_each_whatever_the_base_order(metis, tmp_path):
    tag = uuid.uuid4().hex[:8]
    up, down = f"t-up-{tag}", f"t-down-{tag}"
    dead_url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with hash_embedder.serve() as url:
        model = {"embedding_model": hash_embedder.MODEL, "embedding_dim": hash_embedder.DIM, "model_timeout_s": 2.0}
        try:
            metis.create_base(up, embedding_url=url, **model)
            metis.index(up, write_corpus(tmp_path / "up", PORT))
            metis.create_base(down, embedding_url=dead_url, **model)
            for order in ([down, up], [up, down]):
                answer = metis.search(order, "anchor chain", top_k=6)
                from_up = [r for r in answer.results if r.base == up]
                assert from_up and all(r.scores.dense is not None for r in from_up), order
                keyword_only = [w.message for w in answer.warnings if w.code == "KEYWORD_ONLY"]
                assert len(keyword_only) == 1 and dead_url in keyword_only[0], order
        finally:
            for name in (up, down):
                metis.drop_base(name)
