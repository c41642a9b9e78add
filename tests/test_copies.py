"""Copies of one text in a leg's list (issue 20): with copies collapsed, a chunk whose text is that
of a chunk the leg ranked above it takes no place in that leg.

A real base in the embedded PostgreSQL, made like npm's manual: ten command pages each document
the same two options under their own heading (the same text, in pages of different titles), beside
60 pages of their own. Each leg of ``sql/search/hybrid.sql`` is checked against the same leg with
copies kept, asked long enough to rank every chunk: collapsed, the dense leg is that list with
every later copy of a text removed, cut at leg_limit, ranked from 1, with the same scores; the
keyword leg is its top leg_limit with every later copy removed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from types import SimpleNamespace

import httpx
import numpy as np
import pytest

import metis_pg
from metis_pg import retrieval, service, storage
from metis_pg.config import BaseSpec
from metis_pg.errors import ConfigError, InvalidInput
from metis_pg.tokenizer import query_terms

import hash_embedder
from cli_runner import run_cli
from corpus import write_corpus

WORDS = ("package folder symlink install dependency registry cache workspace script lockfile version "
         "publish audit token scope global prefix link protocol tarball").split()
SHARED = {
    "install-links": "When set, file: protocol dependencies are packed and installed as regular dependencies "
                     "instead of a symlink to the package folder.",
    "foreground-scripts": "Run all build scripts (preinstall, install, postinstall) in the foreground, their "
                          "output shown, one package at a time.",
}
QUESTIONS = ["dependencies packed and installed as regular ones instead of a symlink", "install scripts output shown",
             "registry cache token", "dependency lockfile version"]
TOKEN = "test-token-" + "5" * 24


def _corpus() -> dict[str, str]:
    rng = np.random.default_rng(7)
    files = {f"page{i:02d}.md": f"# Page {i}\n\n" + " ".join(rng.choice(WORDS, size=int(rng.integers(8, 30)))) + ".\n"
             for i in range(60)}
    for i in range(10):
        options = "".join(f"## {name}\n\n{text}\n\n" for name, text in SHARED.items())
        files[f"commands/npm-cmd{i}.md"] = (f"# npm-cmd{i}\n\n## Description\n\nThe command number {i} "
                                            f"{' '.join(rng.choice(WORDS, size=6))}.\n\n## Configuration\n\n"
                                            + options)
    return files


@pytest.fixture(scope="module")
def kb(metis: metis_pg.Metis, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    root = write_corpus(tmp_path_factory.mktemp("copies") / "kb", _corpus())
    name = f"t-copies-{uuid.uuid4().hex[:8]}"
    with hash_embedder.serve() as url:
        metis.create_base(name, embedding_model=hash_embedder.MODEL, embedding_url=url,
                          embedding_dim=hash_embedder.DIM)
        try:
            assert metis.index(name, root).chunks_without_vector == 0
            with metis.pool.connection() as conn:
                row = storage.get_base(conn, name)
                texts = dict(conn.execute("SELECT chunk_id, text FROM chunks WHERE base_id = %s",
                                          (row.base_id,)).fetchall())
            yield SimpleNamespace(name=name, row=row, texts=texts)
        finally:
            metis.drop_base(name)


def _legs(metis, kb, question: str, collapse: bool, legs_top_k: int) -> dict[str, list[tuple[int, float]]]:
    """Each leg's list, (chunk_id, score) in rank order, of one statement."""
    with metis.pool.connection() as conn:
        found, _ = retrieval.run_search(
            conn, base_ids=[kb.row.base_id], model=f"{hash_embedder.MODEL}:{hash_embedder.DIM}",
            query_embedding=hash_embedder.HashEmbedder().embed_queries([question])[0], terms=query_terms(question),
            top_k=1000, legs_top_k=legs_top_k, filters=retrieval.Filters(), collapse_copies=collapse)
    legs = {}
    for leg, rank, score in (("dense", "dense_rank", "dense"), ("keyword", "keyword_rank", "keyword")):
        ranked = sorted((getattr(c, rank), c.chunk_id, getattr(c, score)) for c in found if getattr(c, rank))
        assert [r for r, _, _ in ranked] == list(range(1, len(ranked) + 1)), (leg, "ranks from 1, no gap")
        legs[leg] = [(chunk_id, s) for _, chunk_id, s in ranked]
    return legs


def test_the_corpus_holds_copies(kb):
    copies = [t for t in kb.texts.values() if t.strip() in SHARED.values()]
    assert len(copies) == 20  # ten pages x two options, each its own chunk with the same text
    assert len(kb.texts) - len(set(kb.texts.values())) == 18


@pytest.mark.parametrize("question", QUESTIONS)
def test_each_leg_keeps_leg_limit_distinct_texts_with_the_scores_it_had(metis, kb, question):
    limit = retrieval.leg_limit(1)  # 50, of 90 chunks: legs are cut
    assert len(kb.texts) > limit
    every = _legs(metis, kb, question, collapse=False, legs_top_k=100)  # every chunk a leg can rank
    kept = _legs(metis, kb, question, collapse=False, legs_top_k=1)
    collapsed = _legs(metis, kb, question, collapse=True, legs_top_k=1)
    for leg in ("dense", "keyword"):
        # The dense leg keeps leg_limit distinct texts; the keyword leg the distinct texts of its
        # exact top leg_limit (sql/search/hybrid.sql).
        full = every[leg] if leg == "dense" else every[leg][:limit]
        seen: set[str] = set()
        expected = []
        for chunk_id, score in full:
            if kb.texts[chunk_id] not in seen:
                seen.add(kb.texts[chunk_id])
                expected.append((chunk_id, score))
        expected = expected[:limit]
        assert collapsed[leg] == expected, leg
        texts = [kb.texts[c] for c, _ in collapsed[leg]]
        assert len(texts) == len(set(texts)) == min(limit, len(seen))
        # Copies kept, the leg is the first leg_limit of the full list, as before.
        assert kept[leg] == every[leg][:limit]
    assert len(collapsed["dense"]) == limit  # the dense leg ranks every chunk: 72 distinct texts


def test_the_question_of_the_copies_gets_its_other_pages_back(metis, kb):
    question = QUESTIONS[0]
    kept = _legs(metis, kb, question, collapse=False, legs_top_k=1)
    collapsed = _legs(metis, kb, question, collapse=True, legs_top_k=1)
    for leg in ("dense", "keyword"):
        top = [kb.texts[c] for c, _ in kept[leg][:10]]
        copies = sum(1 for t in top if t.strip() == SHARED["install-links"])
        assert copies >= 3, (leg, "copies of the option fill the first places")
        ctop = [kb.texts[c] for c, _ in collapsed[leg][:10]]
        assert sum(1 for t in ctop if t.strip() == SHARED["install-links"]) == 1


def _copies_in(results_texts: list[str]) -> int:
    return sum(1 for t in results_texts if t.strip() == SHARED["install-links"])


def test_a_new_base_collapses_copies_and_a_search_may_keep_them(metis, kb, dsn, tmp_path_factory):
    question = QUESTIONS[0]
    collapsed = metis.search(kb.name, question, top_k=10)
    kept = metis.search(kb.name, question, top_k=10, fusion={"collapse_copies": False})
    assert collapsed.fusion["collapse_copies"] is True and kept.fusion["collapse_copies"] is False
    # One place per leg at most for the option's text: once by the dense leg, once by the keyword leg.
    assert _copies_in([kb.texts[r.chunk_id] for r in collapsed.results]) <= 2
    assert _copies_in([kb.texts[r.chunk_id] for r in kept.results]) >= 3
    # The CLI and HTTP take the same setting.
    cli = run_cli("search", kb.name, question, "--keep-copies", "-n", "10", "--json", "--dsn", dsn)
    assert cli.code == 0, cli.stderr
    assert [r["chunk_id"] for r in cli.json()["results"]] == [r.chunk_id for r in kept.results]
    app = service.create_app(metis, tokens=[TOKEN], source_roots=[tmp_path_factory.mktemp("copies-root")])
    with service.running(app) as url, httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"},
                                                   timeout=60) as client:
        got = client.post("/search", json={"bases": kb.name, "question": question, "top_k": 10,
                                           "fusion": {"collapse_copies": False}})
        assert got.status_code == 200, got.text
        assert got.json()["fusion"]["collapse_copies"] is False
        assert [r["chunk_id"] for r in got.json()["results"]] == [r.chunk_id for r in kept.results]
        bad = client.post("/search", json={"bases": kb.name, "question": question, "fusion": {"collapse_copies": 1}})
        assert bad.status_code == 400


def test_a_base_made_before_keeps_its_copies_and_create_takes_the_setting(metis, base_name):
    assert BaseSpec.from_json({}).collapse_copies is False  # a spec stored before the setting
    assert BaseSpec().collapse_copies is True
    info = metis.create_base(base_name, collapse_copies=False)
    assert info.spec["collapse_copies"] is False
    with pytest.raises(ConfigError, match="collapse_copies must be true or false"):
        BaseSpec(collapse_copies="yes")
    with pytest.raises(InvalidInput, match="collapse_copies must be true or false"):
        metis.search(base_name, "anything", mode="keyword", fusion={"collapse_copies": "no"})


def test_without_a_plan_a_statement_per_base_fuses_as_one_statement_over_both(metis, kb, base_name, tmp_path):
    """``run_search`` and ``fuse_bases`` called without a plan (as benchmarks/search_latency.py and
    citus_scaling.py compare them) take one default of collapse_copies, fusion.COLLAPSE_COPIES, the
    base spec's: with copies of a text in both bases, the per-base statements fused in Python answer
    what one statement over both does, each text once. (Before, run_search read BaseSpec()'s default,
    on, and fuse_bases fell back to Plan's, off: fused per base, the option came twice.)"""
    root = write_corpus(tmp_path / "other", {
        "npm-other.md": f"# npm-other\n\n## install-links\n\n{SHARED['install-links']}\n",
        "misc.md": "# Misc\n\nThe registry cache keeps every tarball.\n"})
    with hash_embedder.serve() as url:
        metis.create_base(base_name, embedding_model=hash_embedder.MODEL, embedding_url=url,
                          embedding_dim=hash_embedder.DIM)
        assert metis.index(base_name, root).chunks_without_vector == 0
    question, top_k = QUESTIONS[0], 6
    with metis.pool.connection() as conn:
        other = storage.get_base(conn, base_name)
        asked = dict(model=f"{hash_embedder.MODEL}:{hash_embedder.DIM}",
                     query_embedding=hash_embedder.HashEmbedder().embed_queries([question])[0],
                     terms=query_terms(question), filters=retrieval.Filters())
        one, _ = retrieval.run_search(conn, base_ids=[kb.row.base_id, other.base_id], top_k=top_k, **asked)
        per_base = [retrieval.run_search(conn, base_ids=[base_id], top_k=2 * retrieval.leg_limit(top_k),
                                         legs_top_k=top_k, **asked)[0]
                    for base_id in (kb.row.base_id, other.base_id)]
    fused = retrieval.fuse_bases(per_base, legs_top_k=top_k, top_k=top_k)
    assert [(c.chunk_id, c.dense_rank, c.keyword_rank) for c in fused] == \
        [(c.chunk_id, c.dense_rank, c.keyword_rank) for c in one]
    assert _copies_in([c.text for c in fused]) <= 2  # at most once per leg
    assert [c.fused for c in fused] == pytest.approx([c.fused for c in one], abs=1e-12)
