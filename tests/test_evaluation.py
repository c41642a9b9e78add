"""Evaluation (F16): metrics against trec_eval, the loaders, query types, and an end-to-end run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import pytrec_eval

import metis_pg
from metis_pg import evaluation
from metis_pg.evaluation import Judgment, mrr_at_k, ndcg_at_k, query_type, ranked_units, recall_at_k
from metis_pg.readers import read_document

from cli_runner import run_cli

# Tiny qrels with graded and binary judgments, and runs with distinct scores.
QRELS = {
    "q1": {"d1": 3, "d2": 1, "d3": 2, "d9": 0},
    "q2": {"d4": 1},
    "q3": {"d5": 2, "d6": 2, "d7": 1, "d8": 3},
    "q4": {"d1": 1, "d2": 2},
}
RANKINGS = {
    "q1": ["d2", "d9", "d1", "d7", "d3"],
    "q2": ["d1", "d2", "d3", "d5", "d6", "d7", "d8", "d9", "d10", "d11", "d4"],  # found at 11: outside @10
    "q3": ["d8", "d5", "x1", "d7"] + [f"y{i}" for i in range(50)] + ["d6"],  # d6 beyond 50
    "q4": [],
}


def _trec(measures: set[str], cut: int | None = None) -> dict[str, dict[str, float]]:
    run = {q: {d: float(1000 - i) for i, d in enumerate(r[:cut] if cut else r)} for q, r in RANKINGS.items()}
    run = {q: r or {"nothing": 0.0} for q, r in run.items()}
    return pytrec_eval.RelevanceEvaluator(QRELS, measures).evaluate(run)


def test_ndcg_at_10_equals_trec_eval():
    oracle = _trec({"ndcg_cut.10"})
    assert len(oracle) == len(QRELS)
    for q, ranking in RANKINGS.items():
        assert ndcg_at_k(ranking, QRELS[q], 10) == pytest.approx(oracle[q]["ndcg_cut_10"], abs=1e-9)


def test_recall_at_10_and_50_equal_trec_eval():
    oracle = _trec({"recall.10,50"})
    assert len(oracle) == len(QRELS)
    for q, ranking in RANKINGS.items():
        assert recall_at_k(ranking, QRELS[q], 10) == pytest.approx(oracle[q]["recall_10"], abs=1e-9)
        assert recall_at_k(ranking, QRELS[q], 50) == pytest.approx(oracle[q]["recall_50"], abs=1e-9)


def test_mrr_at_10_equals_trec_eval_reciprocal_rank_of_the_first_ten():
    oracle = _trec({"recip_rank"}, cut=10)
    assert len(oracle) == len(QRELS)
    for q, ranking in RANKINGS.items():
        assert mrr_at_k(ranking, QRELS[q], 10) == pytest.approx(oracle[q]["recip_rank"], abs=1e-9)


def test_ndcg_by_hand_uses_linear_gain_and_log2_discount():
    # DCG = 1/log2(2) + 3/log2(4) = 2.5; ideal = 3 + 1/log2(3).
    expected = 2.5 / (3 + 1 / 1.584962500721156)
    assert ndcg_at_k(["b", "x", "a"], {"a": 3, "b": 1}, 10) == pytest.approx(expected)


def test_a_document_counts_once_at_its_first_rank():
    results = [("a.md", 1, 1, None), ("b.md", 2, 1, None), ("a.md", 3, 30, None), ("c.md", 4, 1, None)]
    assert ranked_units(results, [Judgment("c.md", 2)]) == ["a.md", "b.md", "c.md"]


def test_a_line_judgment_is_the_passage_holding_that_line():
    judgments = [Judgment("guide.md", 3, line=42)]
    chunk_lines = {"guide.md": [(1, 10), (30, 11), (60, 12)]}
    results = [("guide.md", 10, 1, None), ("guide.md", 11, 30, None), ("other.md", 20, 1, None)]
    units = ranked_units(results, judgments, chunk_lines)
    assert units == ["guide.md#chunk10", "guide.md#L42", "other.md#chunk20"]
    assert ndcg_at_k(units, {"guide.md#L42": 3}) == pytest.approx(1 / 1.584962500721156)


def test_a_page_judgment_is_any_passage_of_that_page():
    results = [("r.pdf", 5, None, 2), ("r.pdf", 6, None, 3), ("r.pdf", 7, None, 3)]
    assert ranked_units(results, [Judgment("r.pdf", 1, page=3)]) == ["r.pdf#chunk5", "r.pdf#p3"]


@pytest.mark.parametrize("question", [
    "PO-2231 approval", "error E4021", "db.max_pool_size default", "ECONNREFUSED 127.0.0.1:5432",
    "useState hook", "TW-0317 古籍除湿", "ZH_API-77 回调失败",
])
def test_identifier_like_questions(question):
    assert query_type(question) == "identifier"


def test_a_quoted_phrase_is_its_own_type():
    assert query_type('"Authorization: Bearer" token') == query_type('“reset the router”') == "phrase"


@pytest.mark.parametrize("question", [
    "how many vacation days do I get", "state-of-the-art retrieval", "CAP theorem", "what happened in 1984",
    "北辰物流 冷链温控报警", "API authentication bearer token",
])
def test_natural_language_questions(question):
    assert query_type(question) == "natural"


def _beir_folder(folder: Path, *, header: bool) -> Path:
    (folder / "qrels").mkdir(parents=True)
    corpus = [
        {"_id": "d1", "title": "Purchase orders", "text": "Purchase order PO-2231 was approved on Monday."},
        {"_id": "<x:Router>", "title": "Router", "text": "Reset the router with the red button for ten seconds."},
        {"_id": "d3", "title": "", "text": "Billing questions go through the account portal."},
    ]
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(c) for c in corpus) + "\n", encoding="utf-8")
    queries = [{"_id": "q1", "text": "PO-2231"}, {"_id": "q2", "text": "reset the router"},
               {"_id": "q3", "text": "not judged relevant"}]
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n", encoding="utf-8")
    rows = ["q1\td1\t1", "q2\t<x:Router>\t2", "q3\td3\t0"]
    (folder / "qrels" / "test.tsv").write_text(("query-id\tcorpus-id\tscore\n" if header else "") + "\n".join(rows)
                                              + "\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize("header", [True, False])
def test_beir_folder_loads_with_or_without_a_qrels_header(tmp_path, header):
    eval_set = evaluation.load_beir(_beir_folder(tmp_path / "set", header=header), cache_dir=tmp_path / "cache")
    assert [q.query_id for q in eval_set.queries] == ["q1", "q2"]
    assert eval_set.skipped == 1
    assert eval_set.queries[1].judgments == (Judgment("%3Cx%3ARouter%3E.md", 2),)
    assert (tmp_path / "cache" / "d1.md").read_text(encoding="utf-8").startswith("# Purchase orders\n\nPurchase")
    untitled = tmp_path / "cache" / "d3.md"
    assert untitled.read_text(encoding="utf-8") == '---\ntitle: ""\n---\nBilling questions go through the account portal.\n'
    assert read_document(untitled).title == ""


def test_a_grade_above_3_is_refused():
    with pytest.raises(metis_pg.InvalidInput, match="grade"):
        evaluation.eval_set_from_dict({"queries": [{"question": "q", "relevant": [{"document": "a.md", "grade": 4}]}]},
                                      name="x")


EVAL_CORPUS = {
    "orders.md": "# Orders\n\nPurchase order PO-2231 was approved on Monday.\n",
    "router.md": "# Router\n\nReset the router using the red button for ten seconds.\n",
    "billing.md": "# Billing\n\nBilling questions are handled through the account portal.\n",
    "guide.md": "# Guide\n\n## Install\n\n" + "Install the package with pip. " * 50 + "\n\n## Vacation\n\n"
                + "Employees get 25 vacation days per year. " * 10 + "\n",
}


def _json_set(tmp_path: Path) -> Path:
    corpus = tmp_path / "kb"
    corpus.mkdir()
    for name, text in EVAL_CORPUS.items():
        (corpus / name).write_text(text, encoding="utf-8")
    vacation_line = EVAL_CORPUS["guide.md"].splitlines().index("## Vacation") + 1
    data = {
        "name": "tiny",
        "corpus": "kb",
        "queries": [
            {"id": "po", "question": "PO-2231", "relevant": [{"document": "orders.md", "grade": 3}]},
            {"id": "billing", "question": "billing portal", "relevant": ["billing.md"]},
            {"id": "vacation", "question": "vacation days per year",
             "relevant": [{"document": "guide.md", "line": vacation_line + 2, "grade": 2}]},
        ],
    }
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_evaluate_indexes_the_corpus_and_scores_known_answers(metis, base_name, tmp_path):
    report = metis.evaluate(base_name, _json_set(tmp_path))
    assert metis.base(base_name).documents == len(EVAL_CORPUS)
    assert [m.mode for m in report.modes] == ["hybrid", "dense", "keyword"]
    assert report.queries == 3 and report.level == "passage"
    keyword = report.mode("keyword")
    assert keyword.overall.ndcg_at_10 == pytest.approx(1.0)
    assert keyword.overall.zero_result_rate == 0.0
    assert keyword.by_type["identifier"].queries == 1 and keyword.by_type["natural"].queries == 2
    vacation = [s for s in report.per_query if s.query_id == "vacation" and s.mode == "keyword"]
    assert len(vacation) == 1 and vacation[0].units[0].startswith("guide.md#L")


def test_evaluate_leaves_the_shared_embedder_to_concurrent_searches(metis, base_name, tmp_path):
    eval_set = _json_set(tmp_path)
    metis.index(base_name, tmp_path / "kb")
    spec = metis_pg.BaseSpec.from_json(metis._base_row(base_name).spec)
    shared = metis.embedder(spec)
    seen = []

    def during_run(done: int, total: int) -> None:
        # What a search in another thread would embed with, while the evaluation runs.
        seen.append(metis.embedder(spec))

    metis.evaluate(base_name, eval_set, modes=["dense"], on_progress=during_run)
    assert seen and all(e is shared for e in seen)


def test_evaluate_a_beir_folder_into_a_base_named_for_it(metis, tmp_path, monkeypatch):
    monkeypatch.setenv("METIS_HOME", str(tmp_path / "home"))
    folder = _beir_folder(tmp_path / f"beir-{tmp_path.name[-8:]}", header=False)
    try:
        report = metis.evaluate(None, folder, modes=["keyword"])
        assert report.base == folder.name
        assert metis.base(folder.name).documents == 3
        assert (tmp_path / "home" / "eval-corpora" / folder.name / "d1.md").is_file()
        assert report.mode("keyword").overall.recall_at_10 == pytest.approx(1.0)
    finally:
        metis.drop_base(folder.name)


def test_metis_eval_prints_json_per_mode(dsn, metis, base_name, tmp_path):
    result = run_cli("eval", str(_json_set(tmp_path)), "--base", base_name, "--mode", "keyword", "--json",
                     "--dsn", dsn)
    assert result.code == 0, result.stderr
    data = result.json()
    assert [m["mode"] for m in data["modes"]] == ["keyword"]
    assert set(data["modes"][0]) >= {"ndcg_at_10", "recall_at_10", "recall_at_50", "mrr_at_10",
                                     "zero_result_rate", "p50_ms", "p95_ms", "by_type"}
