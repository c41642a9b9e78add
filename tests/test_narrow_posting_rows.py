"""Migration 0023 on a populated base: the narrower posting rows search exactly as the old ones (issue 24).

A base is written through the real write path with repeated words (every tier, rows whose
postings share one tf and rows whose do not, one-posting rows), documents deleted and rewritten;
then taken to revision 0022, whose rows must be those its writer wrote (a tier column, tfs in
every row of several postings); the keyword leg, the fused statement (with a path filter, a phrase
and an excluded word) and view ``metis.postings`` read there are kept; upgraded to 0023, every one
of them must be identical, the rows those the encoding defines, the keyword leg exactly exhaustive
BM25, and a one-posting row 14 bytes shorter.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from metis_pg import migrate, retrieval, storage
from metis_pg.chunking import Chunk, embedding_text
from metis_pg.config import BaseSpec, Settings
from metis_pg.storage.postings import PostingRow, encode_blocks, encode_columns
from metis_pg.tokenizer import terms
from test_bm25_oracle import ExhaustiveBM25, difference, ranked
from pg_servers import new_database

WORDS = [f"w{i}" for i in range(200)]
MODEL = "m:8"


@pytest.fixture()
def database(dsn):
    """A new database at the newest revision; dropped after."""
    with new_database(dsn, "metis_narrow") as url:
        migrate.upgrade(url, settings=Settings.from_env())
        yield url


def _document(rng: np.random.Generator, path: str, p: np.ndarray) -> storage.PendingDocument:
    chunks = []
    for ordinal in range(int(rng.integers(1, 30))):
        # Zipf words, some repeated in runs: tf 1, 2-3, 4-7 and 8+ all occur.
        words = list(rng.choice(WORDS, size=int(rng.integers(0, 80)), p=p))
        if words and rng.random() < 0.5:
            words += [words[0]] * int(rng.choice([1, 2, 5, 12]))
        text = " ".join(words)
        chunks.append(Chunk(ordinal=ordinal, text=text, title="", headings=(), page=None, line=1,
                            char_start=0, char_end=len(text)))
    vectors = list(rng.standard_normal((len(chunks), 8)).astype(np.float32))
    return storage.PendingDocument(storage.DocumentMeta(path, "", "txt", path, 1), chunks, vectors)


def _stored(conn, base_id: int) -> list[tuple]:
    return sorted(conn.execute(
        "SELECT t.term, to_jsonb(pb) - 'base_id' - 'term_id' FROM posting_blocks AS pb"
        " JOIN bm25_terms AS t ON t.base_id = pb.base_id AND t.term_id = pb.term_id WHERE pb.base_id = %s",
        (base_id,)).fetchall(), key=lambda r: (r[0], r[1]["block_no"], r[1]["max_tf"]))


def _searches(conn, base_id: int, questions, vectors, some_chunks: list[int]) -> list:
    """Every question, keyword leg alone and fused: no filter, a path filter, only some chunks (as
    a quoted phrase gives), its last word excluded."""
    out = []
    for question, vector in zip(questions, vectors):
        for query_vector in (None, vector):
            for filters, only, excluded in ((retrieval.Filters(), None, ()),
                                            (retrieval.Filters(path_prefix="a/"), None, ()),
                                            (retrieval.Filters(), some_chunks, ()),
                                            (retrieval.Filters(), None, question[-1:])):
                found, _ = retrieval.run_search(conn, base_ids=[base_id], model=MODEL, query_embedding=query_vector,
                                                terms=question, top_k=10, filters=filters, only_chunks=only,
                                                exclude_terms=excluded)
                out.append([(c.chunk_id, c.keyword, c.keyword_rank, c.dense, c.dense_rank, c.fused) for c in found])
    return out


def test_upgrade_to_narrow_rows_keeps_every_result_and_row_and_shortens_them(database):
    rng = np.random.default_rng(24)
    p = 1 / np.arange(1, len(WORDS) + 1)
    p /= p.sum()
    with psycopg.connect(database) as conn:
        base = storage.create_base(conn, "narrow", "documents", BaseSpec(embedding_dim=8).to_json())
        source_id = storage.ensure_source(conn, base.base_id, "kb", "/kb")
        for batch in range(4):
            storage.write_documents(conn, base_id=base.base_id, source_id=source_id, model=MODEL, documents=[
                _document(rng, f"{'ab'[i % 2]}/{batch}-{i}.txt", p) for i in range(int(rng.integers(5, 20)))])
        ids = [r[0] for r in conn.execute("SELECT document_id FROM documents WHERE base_id = %s ORDER BY 1",
                                          (base.base_id,))]
        for document_id in ids[3:9]:  # rows rewritten without some chunks, some rows emptied
            storage.delete_document(conn, base.base_id, document_id)
        conn.commit()
        texts = dict(conn.execute("SELECT chunk_id, text FROM chunks WHERE base_id = %s", (base.base_id,)).fetchall())
        questions = [sorted(set(rng.choice(WORDS, size=int(rng.integers(1, 5)), p=p))) for _ in range(40)]
        questions += [["w0", "w1"], ["w199"], ["w0", "w150", "w3"]]
        vectors = list(rng.standard_normal((len(questions), 8)).astype(np.float32))
        some_chunks = sorted(texts)[::3]
        narrow = _stored(conn, base.base_id)
        # Searched at head, before the downgrade: today's statement reads columns later migrations
        # add (chunks.col, 0025), so it cannot run at 0022; the upgrade must give the same rows
        # back (asserted below), and the same results.
        register_vector(conn)
        results_before = _searches(conn, base.base_id, questions, vectors, some_chunks)
        rows = encode_blocks([(cid, terms(t)) for cid, t in texts.items()]).rows
        # Deletes rewrite rows as the writer would have written them without those chunks.
        assert len(narrow) == len(rows)

    migrate.downgrade(database, "0022", settings=Settings.from_env())
    with psycopg.connect(database) as conn:
        wide = _stored(conn, base.base_id)
        # Revision 0022's rows: as its writer wrote them (tier column, tfs in every row of several postings).
        columns = encode_columns([(cid, terms(t)) for cid, t in texts.items()])
        old_rows = {}
        for r in range(len(columns.term)):
            s, e = columns.starts[r], columns.starts[r + 1]
            several = e - s > 1
            old_rows[(columns.terms[columns.term[r]], int(columns.block_no[r]), int(columns.tier[r]))] = {
                "tier": int(columns.tier[r]), "block_no": int(columns.block_no[r]), "max_tf": int(columns.max_tf[r]),
                "min_length": int(columns.min_length[r]), "first_offset": int(columns.first_offset[r]),
                "offsets": columns.offsets[s:e].tolist() if several else None,
                "tfs": columns.tfs[s:e].tolist() if several else None}
        assert {(t, r["block_no"], r["tier"]): r for t, r in wide} == old_rows
        assert any(r["tfs"] and len(set(r["tfs"])) == 1 for _, r in wide)  # rows the upgrade narrows
        assert any(r["tfs"] and len(set(r["tfs"])) > 1 for _, r in wide)  # rows whose tfs stay
        single_before = conn.execute("SELECT DISTINCT pg_column_size(pb.*) FROM posting_blocks AS pb"
                                     " WHERE offsets IS NULL").fetchall()
        view_before = sorted(conn.execute("SELECT term, chunk_id, tf, chunk_terms, document_id FROM metis.postings"
                                          " WHERE base_id = %s", (base.base_id,)).fetchall())

    migrate.upgrade(database, settings=Settings.from_env())
    with psycopg.connect(database) as conn:
        assert _stored(conn, base.base_id) == narrow
        stored = {(t, _tier(r["max_tf"]), r["block_no"]): PostingRow(
            r["first_offset"], r["max_tf"], r["min_length"], r["offsets"], r["tfs"]) for t, r in narrow}
        assert stored == {(t, tier, block): row for (t, tier, block), row in rows.items()}
        single_after = conn.execute("SELECT DISTINCT pg_column_size(pb.*) FROM posting_blocks AS pb"
                                    " WHERE offsets IS NULL").fetchall()
        assert (single_before, single_after) == ([(58,)], [(44,)])
        for view in ("metis.postings", "metis.postings_v2"):
            assert sorted(conn.execute(f"SELECT term, chunk_id, tf, chunk_terms, document_id FROM {view}"
                                       " WHERE base_id = %s", (base.base_id,)).fetchall()) == view_before
        register_vector(conn)
        assert _searches(conn, base.base_id, questions, vectors, some_chunks) == results_before
        oracle = ExhaustiveBM25({cid: terms(embedding_text("", (), t)) for cid, t in texts.items()})
        for question in questions:
            found, _ = retrieval.run_search(conn, base_ids=[base.base_id], model=MODEL, query_embedding=None,
                                            terms=question, top_k=50, legs_top_k=12, filters=retrieval.Filters())
            got = [(c.chunk_id, c.keyword) for c in found]
            assert difference(got, ranked(*oracle.scores(question))) is None, question
        expected_view = sorted((term, cid, tf) for cid, t in texts.items() for term, tf in Counter(terms(t)).items())
        assert sorted(r[:3] for r in view_before) == expected_view


def _tier(max_tf: int) -> int:
    """A row's tier from its max_tf: 0 for 1, 1 for 2-3, 2 for 4-7, 3 for 8+."""
    return 0 if max_tf == 1 else 1 if max_tf < 4 else 2 if max_tf < 8 else 3
