"""Several bases at once (SPEC F12): one statement for bases of one model, a merge by rank across models."""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from metis_pg.cli import app

import hash_embedder
from corpus import write_corpus

HANDBOOK = {  # "lighthouse" in 1 chunk of 3
    "keeper.txt": "The lighthouse keeper logs the weather every morning.",
    "vacation.txt": "Vacation days are planned with the team lead.",
    "expenses.txt": "Expense reports need every receipt attached.",
}
WIKI = {  # "lighthouse" in every chunk
    "lamp.txt": "The lighthouse lamp uses a rotating lens.",
    "cliff.txt": "A lighthouse stands on the northern cliff.",
    "visits.txt": "Lighthouse visits are open on Sundays.",
}
HARBOUR = {  # another embedding model
    "rebuilt.txt": "The lighthouse in the harbour was rebuilt after the storm.",
    "ferries.txt": "Ferries leave the harbour at noon.",
    "market.txt": "The fish market opens before dawn.",
}


@pytest.fixture(scope="module")
def bases(metis, tmp_path_factory):
    root = tmp_path_factory.mktemp("multibase")
    tag = uuid.uuid4().hex[:8]
    names = SimpleNamespace(handbook=f"t-handbook-{tag}", wiki=f"t-wiki-{tag}", harbour=f"t-harbour-{tag}")
    with hash_embedder.serve() as url:
        try:
            metis.index(names.handbook, write_corpus(root / "handbook", HANDBOOK))
            metis.index(names.wiki, write_corpus(root / "wiki", WIKI))
            metis.create_base(names.harbour, embedding_model=hash_embedder.MODEL, embedding_url=url,
                              embedding_dim=hash_embedder.DIM)
            metis.index(names.harbour, write_corpus(root / "harbour", HARBOUR))
            yield names
        finally:
            for name in vars(names).values():
                metis.drop_base(name)


def test_both_legs_run_over_both_bases_and_each_result_names_its_base(metis, bases):
    answer = metis.search([bases.handbook, bases.wiki], "lighthouse keeper weather", top_k=6)

    assert answer.bases == (bases.handbook, bases.wiki)
    assert len(answer.results) == 6
    assert {r.base for r in answer.results} == {bases.handbook, bases.wiki}
    # One statement: the dense leg ranked the chunks of both bases together.
    assert sorted(r.scores.dense_rank for r in answer.results) == [1, 2, 3, 4, 5, 6]
    keyword_ranked = sorted((r for r in answer.results if r.scores.keyword_rank), key=lambda r: r.scores.keyword_rank)
    assert {r.base for r in keyword_ranked} == {bases.handbook, bases.wiki}
    first = answer.results[0]
    assert (first.base, first.citation.document) == (bases.handbook, "keeper.txt")


def test_each_base_keeps_its_own_bm25_statistics(metis, bases):
    both = metis.search([bases.handbook, bases.wiki], "lighthouse", mode="keyword", top_k=10)
    alone = {}
    for name in (bases.handbook, bases.wiki):
        alone.update({r.chunk_id: r.scores.keyword for r in metis.search(name, "lighthouse", mode="keyword").results})

    assert len(both.results) == 4 and set(alone) == {r.chunk_id for r in both.results}
    for r in both.results:
        assert r.scores.keyword == pytest.approx(alone[r.chunk_id], abs=1e-9)
    # "lighthouse" is rare in the handbook, everywhere in the wiki: its idf differs per base.
    keeper = next(r for r in both.results if r.base == bases.handbook)
    assert keeper.scores.keyword_rank == 1
    assert keeper.scores.keyword > 2 * max(r.scores.keyword for r in both.results if r.base == bases.wiki)


def test_bases_of_different_models_are_each_searched_with_their_model_and_merged_by_rank(metis, bases):
    question = "lighthouse harbour storm"
    alone = {name: metis.search(name, question, top_k=3).results for name in (bases.handbook, bases.harbour)}

    merged = metis.search([bases.handbook, bases.harbour], question, top_k=6)

    assert len(merged.results) == 6
    # Rank k of each base's list is merged at the same RRF score 1/(60 + k).
    for k in range(3):
        pair = merged.results[2 * k : 2 * k + 2]
        assert {(r.base, r.chunk_id) for r in pair} == {
            (bases.handbook, alone[bases.handbook][k].chunk_id), (bases.harbour, alone[bases.harbour][k].chunk_id)}
    # Each base's scores come from its own model and its own statistics.
    for r in merged.results:
        own = next(a for a in alone[r.base] if a.chunk_id == r.chunk_id)
        assert (r.scores.dense, r.scores.keyword, r.scores.fused) == (own.scores.dense, own.scores.keyword, own.scores.fused)
    assert alone[bases.harbour][0].citation.document == "rebuilt.txt"


def test_search_command_takes_bases_separated_by_commas(metis, bases):
    result = CliRunner().invoke(app, ["search", f"{bases.handbook},{bases.wiki}", "lighthouse", "--json",
                                      "--dsn", metis.dsn])

    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["bases"] == [bases.handbook, bases.wiki]
    assert {r["base"] for r in data["results"]} == {bases.handbook, bases.wiki}
    shown = CliRunner().invoke(app, ["search", f"{bases.handbook},{bases.wiki}", "lighthouse", "--dsn", metis.dsn])
    first = data["results"][0]
    assert f"1. {first['base']} · {first['citation']['document']}:1 · " in shown.output


def test_a_statement_per_base_fuses_exactly_as_one_statement_over_both(metis, bases):
    """Issue 22: several bases are searched one statement per base, at once, and fused in Python;
    the answer is the one statement's over both (same ranks in both legs, same fused scores)."""
    from metis_pg import fusion, retrieval, storage
    from metis_pg.config import BaseSpec
    from metis_pg.tokenizer import query_terms

    question = "lighthouse keeper weather"
    with metis.pool.connection() as conn:
        rows = [storage.get_base(conn, n) for n in (bases.handbook, bases.wiki)]
    spec = BaseSpec.from_json(rows[0].spec)
    vector = metis.embedder(spec).embed_queries([question])[0]
    for mode, embedding, terms in (("hybrid", vector, query_terms(question)), ("keyword", None, query_terms(question)),
                                   ("dense", vector, [])):
        with metis.pool.connection() as conn:
            one, _ = retrieval.run_search(conn, base_ids=[r.base_id for r in rows], model=spec.fingerprint,
                                          query_embedding=embedding, terms=terms, top_k=6, filters=retrieval.Filters(),
                                          k1=spec.k1, b=spec.b, plan=fusion.plan(spec, question), compounds=False)
        answer = metis.search([bases.handbook, bases.wiki], question, mode=mode, top_k=6)
        assert [(r.chunk_id, r.scores.dense_rank, r.scores.keyword_rank) for r in answer.results] == \
            [(c.chunk_id, c.dense_rank, c.keyword_rank) for c in one], mode
        assert [r.scores.fused for r in answer.results] == pytest.approx([c.fused for c in one], abs=1e-12)
