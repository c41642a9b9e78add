"""Weighted RRF (issue 14, Fusion): rrf_k, dense_weight and keyword_weight in a base's spec,
overridable per search in Python, the CLI and HTTP, and echoed in the answer.

fused = dense_weight / (rrf_k + dense_rank) + keyword_weight / (rrf_k + keyword_rank), a leg
that did not find the passage adding 0 (Cormack, Clarke & Buettcher, SIGIR 2009, weighted).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator
from types import SimpleNamespace

import httpx
import pytest

import metis_pg
from metis_pg import service
from metis_pg.config import BaseSpec
from metis_pg.errors import ConfigError, InvalidInput

import hash_embedder
from cli_runner import run_cli
from corpus import write_corpus

# Words shared unevenly, so the dense (hashed bag of words) and keyword (BM25) legs disagree.
CORPUS = {
    "router.txt": "Reset the router using the red button for ten seconds.",
    "gateway.txt": "Restore factory defaults on your network gateway and router.",
    "modem.txt": "The modem failed to authenticate; reset the modem and call support.",
    "billing.txt": "Billing questions about the router rental go through the account portal.",
    "button.txt": "The red button on the back is not the power button.",
    "seconds.txt": "Wait ten seconds, then wait ten seconds more before you reset anything.",
    "network.txt": "A network reset forgets every saved network and password.",
    "support.txt": "Support answers calls about routers, modems and gateways on weekdays.",
}
QUESTION = "reset the router red button network"
TOKEN = "test-token-" + "5" * 24


bases_url: dict[str, str] = {}


@pytest.fixture(scope="module")
def bases(metis: metis_pg.Metis, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """The same corpus in two bases of the hash embedder: one with the default fusion, one created
    with dense_weight 2 and keyword_weight 0.5."""
    root = write_corpus(tmp_path_factory.mktemp("fusion") / "kb", CORPUS)
    tag = uuid.uuid4().hex[:8]
    names = SimpleNamespace(plain=f"t-fplain-{tag}", weighted=f"t-fweighted-{tag}")
    with hash_embedder.serve() as url:
        bases_url["url"] = url
        model = {"embedding_model": hash_embedder.MODEL, "embedding_url": url, "embedding_dim": hash_embedder.DIM}
        try:
            # Weighted RRF whatever the default fusion function is (issue 20: chosen by cross-validation).
            metis.create_base(names.plain, **model, fusion="rrf", routing=False)
            metis.create_base(names.weighted, **model, fusion="rrf", routing=False, dense_weight=2.0, keyword_weight=0.5)
            for name in (names.plain, names.weighted):
                report = metis.index(name, root)
                assert report.new == len(CORPUS) and report.chunks_without_vector == 0
            yield names
        finally:
            for name in (names.plain, names.weighted):
                metis.drop_base(name)


def expected_fused(scores, rrf_k: int, dense_weight: float, keyword_weight: float) -> float:
    fused = 0.0
    if scores.dense_rank is not None:
        fused += dense_weight / (rrf_k + scores.dense_rank)
    if scores.keyword_rank is not None:
        fused += keyword_weight / (rrf_k + scores.keyword_rank)
    return fused


def rrf_of(echo: dict) -> dict:
    """The RRF parameters of an answer's fusion echo (it also names the function and the route)."""
    return {k: echo[k] for k in ("rrf_k", "dense_weight", "keyword_weight")}


def assert_weighted_rrf(answer, rrf_k: int, dense_weight: float, keyword_weight: float) -> None:
    assert answer.results
    assert answer.fusion["fusion"] == "rrf"
    assert rrf_of(answer.fusion) == {"rrf_k": rrf_k, "dense_weight": dense_weight, "keyword_weight": keyword_weight}
    for r in answer.results:
        assert r.scores.fused == pytest.approx(expected_fused(r.scores, rrf_k, dense_weight, keyword_weight),
                                               abs=1e-12), r.scores
    fused = [r.scores.fused for r in answer.results]
    assert fused == sorted(fused, reverse=True)


# -- Python API ------------------------------------------------------------------


def test_rrf_weights_default_to_1_2_to_0_8_and_are_echoed(metis, bases):
    # The rrf parameters a base keeps: a dense share of .60, chosen by cross-validation (issue 20,
    # docs/quality.md, third pass).
    assert (BaseSpec().rrf_k, BaseSpec().dense_weight, BaseSpec().keyword_weight) == (60, 1.2, 0.8)
    answer = metis.search(bases.plain, QUESTION, top_k=8)
    assert_weighted_rrf(answer, 60, 1.2, 0.8)
    assert rrf_of(answer.to_dict()["fusion"]) == {"rrf_k": 60, "dense_weight": 1.2, "keyword_weight": 0.8}
    # Both legs found passages, so the weights below have something to weigh.
    assert any(r.scores.dense_rank and r.scores.keyword_rank for r in answer.results)


@pytest.mark.parametrize(("rrf_k", "dense_weight", "keyword_weight"), [
    (60, 1.5, 1.0), (10, 1.0, 3.0), (1, 0.25, 2.0), (60, 1.0, 0.0), (60, 0.0, 1.0),
])
def test_fused_scores_are_the_weighted_formula(metis, bases, rrf_k, dense_weight, keyword_weight):
    fusion = {"rrf_k": rrf_k, "dense_weight": dense_weight, "keyword_weight": keyword_weight}
    answer = metis.search(bases.plain, QUESTION, top_k=8, fusion=fusion)
    assert_weighted_rrf(answer, rrf_k, dense_weight, keyword_weight)
    # The legs themselves do not depend on the weights (the keyword leg's pruning bounds BM25 only).
    plain = {r.chunk_id: r.scores for r in metis.search(bases.plain, QUESTION, top_k=8).results}
    shared = [r for r in answer.results if r.chunk_id in plain]
    assert shared, "the weighted and the default search share no passage: nothing compared"
    for r in shared:
        assert (r.scores.dense, r.scores.dense_rank, r.scores.keyword, r.scores.keyword_rank) == (
            plain[r.chunk_id].dense, plain[r.chunk_id].dense_rank,
            plain[r.chunk_id].keyword, plain[r.chunk_id].keyword_rank)


def test_a_zero_weight_leaves_the_other_legs_order(metis, bases):
    dense_only = metis.search(bases.plain, QUESTION, top_k=8, fusion={"keyword_weight": 0})
    assert [r.scores.dense_rank for r in dense_only.results] == list(range(1, 9))
    words_only = metis.search(bases.plain, QUESTION, top_k=5, fusion={"dense_weight": 0})
    assert [r.scores.keyword_rank for r in words_only.results] == list(range(1, 6))


def test_a_base_created_with_weights_keeps_them_and_searches_use_them(metis, bases):
    spec = metis.base(bases.weighted).spec
    assert (spec["rrf_k"], spec["dense_weight"], spec["keyword_weight"]) == (60, 2.0, 0.5)
    assert metis.base(bases.plain).spec["dense_weight"] == 1.2
    assert_weighted_rrf(metis.search(bases.weighted, QUESTION, top_k=8), 60, 2.0, 0.5)


def test_the_override_wins_over_the_spec_key_by_key(metis, bases):
    answer = metis.search(bases.weighted, QUESTION, top_k=8, fusion={"keyword_weight": 3, "rrf_k": 20})
    assert_weighted_rrf(answer, 20, 2.0, 3.0)
    same = metis.search(bases.plain, QUESTION, top_k=8, fusion={"dense_weight": 2, "keyword_weight": 3, "rrf_k": 20})
    # The same corpus in both bases (other chunk ids): the same ranks in the same order.
    assert [(r.scores.dense_rank, r.scores.keyword_rank) for r in answer.results] == [
        (r.scores.dense_rank, r.scores.keyword_rank) for r in same.results]


def test_bases_of_different_weights_are_each_fused_with_their_own(metis, bases):
    both = metis.search([bases.plain, bases.weighted], QUESTION, top_k=10)
    assert set(both.fusion) == {"per_base"}
    assert {name: rrf_of(echo) for name, echo in both.fusion["per_base"].items()} == {
        bases.plain: {"rrf_k": 60, "dense_weight": 1.2, "keyword_weight": 0.8},
        bases.weighted: {"rrf_k": 60, "dense_weight": 2.0, "keyword_weight": 0.5},
    }
    alone = {name: {r.chunk_id: r.scores.fused for r in metis.search(name, QUESTION, top_k=10).results}
             for name in (bases.plain, bases.weighted)}
    assert {r.base for r in both.results} == {bases.plain, bases.weighted}
    for r in both.results:
        assert r.scores.fused == pytest.approx(alone[r.base][r.chunk_id], abs=1e-12)
    # An override of all three makes them one statement again, with one fusion.
    same = metis.search([bases.plain, bases.weighted], QUESTION, top_k=10,
                        fusion={"rrf_k": 30, "dense_weight": 1.5, "keyword_weight": 1.0})
    assert_weighted_rrf(same, 30, 1.5, 1.0)


def test_compare_uses_the_same_weights_as_search(metis, bases):
    fusion = {"dense_weight": 1.0, "keyword_weight": 4.0, "rrf_k": 5}
    answer = metis.search(bases.plain, QUESTION, top_k=5, fusion=fusion)
    result = metis.compare(bases.plain, QUESTION, top_k=5, fusion=fusion)
    hybrid = sorted((p for p in result.passages if p.hybrid_rank), key=lambda p: p.hybrid_rank)
    assert [p.chunk_id for p in hybrid] == [r.chunk_id for r in answer.results]
    assert [p.fused for p in hybrid] == pytest.approx([r.scores.fused for r in answer.results], abs=1e-12)
    assert rrf_of(result.fusion) == rrf_of(answer.fusion) == {"rrf_k": 5, "dense_weight": 1.0, "keyword_weight": 4.0}
    assert result.to_dict()["fusion"] == result.fusion
    # And a base's own weights, without an override.
    spec_result = metis.compare(bases.weighted, QUESTION, top_k=5)
    assert rrf_of(spec_result.fusion) == {"rrf_k": 60, "dense_weight": 2.0, "keyword_weight": 0.5}
    for p in spec_result.passages:
        if p.hybrid_rank:
            assert p.fused == pytest.approx(expected_fused(p, 60, 2.0, 0.5), abs=1e-12)


BAD_FUSIONS = [
    ({"rrf_k": 0}, "rrf_k"),
    ({"rrf_k": 10_001}, "rrf_k"),
    ({"rrf_k": 2.5}, "rrf_k"),
    ({"rrf_k": True}, "rrf_k"),
    ({"dense_weight": -1}, "dense_weight"),
    ({"dense_weight": math.nan}, "dense_weight"),
    ({"keyword_weight": math.inf}, "keyword_weight"),
    ({"keyword_weight": "1"}, "keyword_weight"),
    ({"dense_weight": 0, "keyword_weight": 0}, "both be 0"),
    ({"weights": 1}, "no field 'weights'"),
]


@pytest.mark.parametrize(("fusion", "says"), BAD_FUSIONS, ids=[str(f) for f, _ in BAD_FUSIONS])
def test_bad_fusion_overrides_are_refused(metis, bases, fusion, says):
    with pytest.raises(InvalidInput, match=says):
        metis.search(bases.plain, QUESTION, fusion=fusion)
    with pytest.raises(InvalidInput, match=says):
        metis.compare(bases.plain, QUESTION, fusion=fusion)


@pytest.mark.parametrize(("fusion", "says"), [f for f in BAD_FUSIONS if "no field" not in f[1]],
                         ids=[str(f) for f, s in BAD_FUSIONS if "no field" not in s])
def test_bad_fusion_parameters_are_refused_in_a_spec(fusion, says):
    with pytest.raises(ConfigError, match=says):
        BaseSpec(**fusion)


def test_an_override_zeroing_the_only_weight_a_base_has_left_is_refused(metis, bases, base_name):
    metis.create_base(base_name, embedding_model=hash_embedder.MODEL, embedding_dim=hash_embedder.DIM,
                      embedding_url=bases_url["url"], keyword_weight=0)
    with pytest.raises(InvalidInput, match="both be 0"):
        metis.search(base_name, QUESTION, mode="keyword", fusion={"dense_weight": 0})


def test_a_spec_stored_before_the_weights_existed_reads_as_plain_rrf():
    old = BaseSpec().to_json()
    del old["dense_weight"], old["keyword_weight"]
    spec = BaseSpec.from_json(old)
    assert (spec.dense_weight, spec.keyword_weight) == (1.0, 1.0)


# -- CLI ------------------------------------------------------------------------


def test_cli_weights_and_rrf_k_reach_the_search_and_are_echoed(dsn, bases):
    result = run_cli("search", bases.plain, QUESTION, "--weights", "1.5:1", "--rrf-k", "10", "--top-k", "6",
                     "--json", "--dsn", dsn)
    assert result.code == 0, result.stderr
    data = result.json()
    assert rrf_of(data["fusion"]) == {"rrf_k": 10, "dense_weight": 1.5, "keyword_weight": 1.0}
    for r in data["results"]:
        s = SimpleNamespace(dense_rank=r["scores"].get("dense_rank"), keyword_rank=r["scores"].get("keyword_rank"))
        assert r["scores"]["fused"] == pytest.approx(expected_fused(s, 10, 1.5, 1.0), abs=1e-12)
    compared = run_cli("search", bases.plain, QUESTION, "--weights", "1.5:1", "--rrf-k", "10", "--compare",
                       "--json", "--dsn", dsn)
    assert compared.code == 0, compared.stderr
    assert rrf_of(compared.json()["fusion"]) == rrf_of(data["fusion"])


def test_cli_says_which_weights_fused_when_they_are_not_the_defaults(dsn, bases):
    plain = run_cli("search", bases.plain, QUESTION, "--dsn", dsn)
    assert plain.code == 0, plain.stderr
    # The bases of this module fuse by rrf without routing: the default function (config.BaseSpec).
    assert plain.stdout.splitlines()[-1].startswith("hybrid · took ")
    weighted = run_cli("search", bases.plain, QUESTION, "--weights", "1.5:1", "--rrf-k", "20", "--dsn", dsn)
    assert weighted.stdout.splitlines()[-1].startswith("hybrid · weights 1.5:1 · rrf_k 20 · took ")
    convex = run_cli("search", bases.plain, QUESTION, "--fusion", "convex", "--alpha", "0.6", "--dsn", dsn)
    assert convex.stdout.splitlines()[-1].startswith(f"hybrid · convex {BaseSpec().normalization} alpha 0.6 · took ")
    both = run_cli("search", f"{bases.plain},{bases.weighted}", QUESTION, "--dsn", dsn)
    assert both.stdout.splitlines()[-1].startswith("hybrid · fusion per base · took ")


@pytest.mark.parametrize("args", [
    ("--weights", "1.5"), ("--weights", "a:b"), ("--weights", "1:2:3"), ("--weights", "-1:1"),
    ("--weights", "0:0"), ("--weights", "nan:1"), ("--rrf-k", "0"), ("--rrf-k", "x"),
])
def test_cli_bad_weights_exit_2_with_one_line(dsn, bases, args):
    result = run_cli("search", bases.plain, QUESTION, *args, "--dsn", dsn)
    assert result.code == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.strip()


def test_cli_base_create_takes_the_weights_and_shows_the_defaults(dsn, metis, base_name):
    help_text = " ".join(run_cli("base", "create", "--help").stdout.split())  # help wraps its lines
    for option in ("--dense-weight", "--keyword-weight", "--rrf-k"):
        assert option in help_text
    assert "Default 60" in help_text and "dense leg in the fusion (>= 0). Default 1.2." in help_text
    assert "keyword leg in the fusion (>= 0). Default 0.8." in help_text
    created = run_cli("base", "create", base_name, "--dense-weight", "1.5", "--keyword-weight", "1",
                      "--json", "--dsn", dsn)
    assert created.code == 0, created.stderr
    assert (created.json()["spec"]["dense_weight"], created.json()["spec"]["keyword_weight"]) == (1.5, 1.0)
    assert metis.base(base_name).spec["dense_weight"] == 1.5
    refused = run_cli("base", "create", base_name + "x", "--dense-weight", "-1", "--dsn", dsn)
    assert refused.code == 2 and "dense_weight" in refused.stderr


def test_cli_base_create_takes_normalization_z(dsn, metis, base_name):
    """z-score normalization (docs/search.md) is a base setting the CLI takes; a wrong name exits 2."""
    created = run_cli("base", "create", base_name, "--fusion", "convex", "--normalization", "z", "--alpha", "0.65",
                      "--json", "--dsn", dsn)
    assert created.code == 0, created.stderr
    spec = metis.base(base_name).spec
    assert (spec["fusion"], spec["normalization"], spec["alpha"]) == ("convex", "z", 0.65)
    refused = run_cli("base", "create", base_name + "x", "--fusion", "convex", "--normalization", "zscore", "--dsn", dsn)
    assert refused.code == 2 and "normalization" in refused.stderr


# -- HTTP -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(metis: metis_pg.Metis, tmp_path_factory) -> Iterator[httpx.Client]:
    app = service.create_app(metis, tokens=[TOKEN], source_roots=[tmp_path_factory.mktemp("fusion-root")])
    with service.running(app) as url, httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
    ) as c:
        yield c


def test_http_search_and_compare_take_a_fusion_object(client, metis, bases):
    fusion = {"dense_weight": 1.5, "keyword_weight": 1, "rrf_k": 12}
    response = client.post("/search", json={"bases": bases.plain, "question": QUESTION, "top_k": 6,
                                             "fusion": fusion})
    assert response.status_code == 200, response.text
    got = response.json()
    want = metis.search(bases.plain, QUESTION, top_k=6, fusion=fusion).to_dict()
    got.pop("took"), want.pop("took")
    assert got == want
    assert rrf_of(got["fusion"]) == {"rrf_k": 12, "dense_weight": 1.5, "keyword_weight": 1.0}
    partial = client.post("/search", json={"bases": bases.weighted, "question": QUESTION,
                                           "fusion": {"keyword_weight": 2}})
    assert rrf_of(partial.json()["fusion"]) == {"rrf_k": 60, "dense_weight": 2.0, "keyword_weight": 2.0}
    compared = client.post("/compare", json={"bases": bases.plain, "question": QUESTION, "top_k": 6,
                                             "fusion": fusion})
    assert compared.status_code == 200, compared.text
    assert rrf_of(compared.json()["fusion"]) == rrf_of(got["fusion"])
    hybrid = sorted((p for p in compared.json()["passages"] if p["ranks"]["hybrid"]), key=lambda p: p["ranks"]["hybrid"])
    assert [p["chunk_id"] for p in hybrid] == [r["chunk_id"] for r in got["results"]]


@pytest.mark.parametrize("fusion", [
    {"rrf_k": 0}, {"rrf_k": 2.5}, {"rrf_k": "60"}, {"dense_weight": -0.5}, {"keyword_weight": "1.5"},
    {"dense_weight": 0, "keyword_weight": 0}, {"weights": "1.5:1"}, "1.5:1",
])
@pytest.mark.parametrize("route", ["/search", "/compare"])
def test_http_bad_fusion_is_400(client, bases, route, fusion):
    response = client.post(route, json={"bases": bases.plain, "question": QUESTION, "fusion": fusion})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "INVALID_REQUEST"


def test_http_non_finite_weight_is_400(client, bases):
    # Python's JSON reader takes NaN and Infinity: they must not reach the statement.
    for value in ("NaN", "Infinity"):
        body = '{"bases": "%s", "question": "router", "fusion": {"dense_weight": %s}}' % (bases.plain, value)
        response = client.post("/search", content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 400, response.text


def test_http_create_base_takes_the_weights(client, metis, base_name):
    created = client.post("/bases", json={"name": base_name, "dense_weight": 1.5, "keyword_weight": 1, "rrf_k": 40})
    assert created.status_code == 201, created.text
    spec = created.json()["spec"]
    assert (spec["rrf_k"], spec["dense_weight"], spec["keyword_weight"]) == (40, 1.5, 1.0)
    assert metis.base(base_name).spec["dense_weight"] == 1.5
    for bad in ({"dense_weight": -1}, {"dense_weight": 0, "keyword_weight": 0}, {"rrf_k": 0}, {"keyword_weight": "x"}):
        response = client.post("/bases", json={"name": base_name + "x", **bad})
        assert response.status_code == 400, (bad, response.text)
    assert json.loads(client.get(f"/bases/{base_name}").text)["spec"]["keyword_weight"] == 1.0


def test_the_scores_line_rounds_as_the_console_does():
    # 2 : 1 makes exact halves common (a passage only the dense leg found at rank 4: 2 / 64 = 0.03125):
    # the CLI's line must read as the console's JavaScript toFixed writes it (half away from zero).
    from metis_pg.results import Scores

    assert Scores(dense=0.5, dense_rank=4, fused=2 / 64).line() == "meaning 0.500 (#4) · fused 0.0313"
    assert Scores(fused=1 / 64, rerank=-0.0005).line() == "fused 0.0156 · reranker -0.001"
