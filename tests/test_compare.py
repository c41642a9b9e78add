"""Compare (F15): one question three ways; ranks equal the mode searches; why each passage came up."""

from __future__ import annotations

from pathlib import Path

import pytest

import metis_pg
from metis_pg.compare import why

from cli_runner import run_cli

CORPUS = {
    "router.txt": "Reset the router using the red button for ten seconds.",
    "gateway.txt": "How to restore factory defaults on your network gateway.",
    "modem.txt": "Error E4021 means the modem failed to authenticate.",
    "billing.txt": "Billing questions are handled through the account portal.",
    "orders.txt": "Purchase order PO-2231 was approved on Monday. Purchase orders need two signatures.",
    "holidays.txt": "Staff may take twenty-five days of paid leave each year.",
    "kitchen.txt": "The kitchen closes at nine; please wash your cup.",
}


@pytest.fixture()
def base(metis: metis_pg.Metis, base_name: str, tmp_path: Path) -> str:
    folder = tmp_path / "kb"
    folder.mkdir()
    for name, text in CORPUS.items():
        (folder / name).write_text(text, encoding="utf-8")
    report = metis.index(base_name, folder)
    assert report.new == len(CORPUS)
    return base_name


@pytest.mark.parametrize("question", ["E4021 router reset", "PO-2231", "how many vacation days do I get"])
def test_ranks_equal_what_each_mode_returns(metis, base, question):
    top_k = 3
    result = metis.compare(base, question, top_k=top_k)
    for mode, rank_of in (("hybrid", "hybrid_rank"), ("dense", "dense_rank"), ("keyword", "keyword_rank")):
        answer = metis.search(base, question, mode=mode, top_k=top_k)
        shown = sorted((getattr(p, rank_of), p.chunk_id) for p in result.passages
                       if getattr(p, rank_of) is not None and getattr(p, rank_of) <= top_k)
        assert shown == [(i, r.chunk_id) for i, r in enumerate(answer.results, start=1)]


def test_every_passage_of_any_mode_is_listed_once(metis, base):
    result = metis.compare(base, "E4021 router reset", top_k=2)
    found = set()
    for mode in ("hybrid", "dense", "keyword"):
        found |= {r.chunk_id for r in metis.search(base, "E4021 router reset", mode=mode, top_k=2).results}
    ids = [p.chunk_id for p in result.passages]
    assert len(ids) == len(set(ids))
    assert set(ids) == found


def test_a_passage_naming_the_identifier_shares_words_at_rank_1(metis, base):
    result = metis.compare(base, "PO-2231", top_k=3)
    orders = [p for p in result.passages if p.citation.document == "orders.txt"]
    assert len(orders) == 1
    assert orders[0].keyword_rank == 1
    assert "shares words (#1)" in orders[0].why


def test_a_passage_without_a_word_of_the_question_is_close_in_meaning_only(metis, base):
    result = metis.compare(base, "how many vacation days do I get", top_k=7)
    without_words = [p for p in result.passages if p.keyword_rank is None]
    assert len(without_words) >= 1
    for p in without_words:
        assert p.agreement == "meaning"
        assert p.why.startswith(f"close in meaning (#{p.dense_rank}); ")


def test_why_names_both_words_meaning_and_reranker():
    assert why(2, 1, 10) == ("both", "close in meaning (#2) and shares words (#1)")
    assert why(23, 1, 10) == ("words", "shares words (#1); not among the closest in meaning (#23)")
    assert why(None, 4, 10) == ("words", "shares words (#4); not among the closest in meaning")
    assert why(1, None, 10) == ("meaning", "close in meaning (#1); its words do not match")
    assert why(1, None, 10, shares_terms=True)[1] == "close in meaning (#1); shares few of its words"
    assert why(2, 1, 10, 0.968)[1] == "close in meaning (#2) and shares words (#1) · the reranker scored it 0.97"


def test_metis_search_compare_prints_json_with_ranks_and_why(dsn, base):
    result = run_cli("search", base, "PO-2231", "--compare", "--top-k", "3", "--json", "--dsn", dsn)
    assert result.code == 0, result.stderr
    data = result.json()
    assert data["question"] == "PO-2231" and data["top_k"] == 3
    assert len(data["passages"]) >= 1
    first = data["passages"][0]
    assert set(first["ranks"]) == {"hybrid", "dense", "keyword"}
    assert first["why"] and first["agreement"] in ("both", "words", "meaning")


def test_metis_search_compare_prints_a_table(dsn, base):
    result = run_cli("search", base, "PO-2231", "--compare", "--top-k", "3", "--dsn", dsn)
    assert result.code == 0, result.stderr
    assert "Meaning" in result.stdout and "Words" in result.stdout and "orders.txt" in result.stdout


def test_why_uses_one_rule_for_both_legs():
    """Issue 25, item 7: a keyword rank beyond top_k is not "shares words", as a dense one is not "close"."""
    assert why(3, 21, 10) == ("meaning", "close in meaning (#3); not among the best by words (#21)")
    assert why(13, 21, 10) == ("both", "found by the fused order (meaning #13, words #21: neither among the first 10)")
    assert why(None, 21, 10)[1] == "found by the fused order (words #21: neither among the first 10)"
    assert why(13, 2, 10)[1] == "shares words (#2); not among the closest in meaning (#13)"
