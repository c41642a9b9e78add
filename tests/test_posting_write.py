"""The posting rows the write path stores (binary COPY built in numpy) are those the encoding defines.

Documents go through ``storage.write_documents`` into a real PostgreSQL; every ``posting_blocks`` row
read back (with its term, through ``bm25_terms``) must equal the row :func:`encode_blocks` gives for
the chunks the base holds, lists included, and ``bm25_terms`` must hold each term's statistics.
"""

from __future__ import annotations

import random

import psycopg

from metis_pg import storage
from metis_pg.chunking import Chunk
from metis_pg.config import BaseSpec
from metis_pg.storage.postings import PostingRow, encode_blocks
from metis_pg.tokenizer import terms


def _document(rng: random.Random, n: int, i: int) -> storage.PendingDocument:
    words = [f"w{k}" for k in range(40)]
    chunks = []
    for ordinal in range(rng.randint(1, 40)):
        # Repeated words reach every tier (tf 1, 2-3, 4-7, 8+); some chunks hold nothing to index.
        text = " ".join(rng.choice(words[: rng.randint(1, 40)]) for _ in range(rng.choice([0, 3, 30, 120])))
        chunks.append(Chunk(ordinal=ordinal, text=text, title="", headings=(), page=None, line=1,
                            char_start=0, char_end=len(text)))
    meta = storage.DocumentMeta(f"d{n}-{i}.txt", "", "txt", f"h{n}-{i}", 1)
    return storage.PendingDocument(meta, chunks)


def test_stored_posting_rows_equal_the_encoding(dsn, base_name):
    rng = random.Random(7)
    with psycopg.connect(dsn, autocommit=True) as conn:
        base = storage.create_base(conn, base_name, "documents", BaseSpec().to_json())
        source_id = storage.ensure_source(conn, base.base_id, "s", None)
        for n in range(3):  # three batches: the later ones update terms the base has
            storage.write_documents(conn, base_id=base.base_id, source_id=source_id, model="m:3",
                                    documents=[_document(rng, n, i) for i in range(rng.randint(5, 25))])
        chunks = conn.execute("SELECT chunk_id, text FROM chunks WHERE base_id = %s", (base.base_id,)).fetchall()
        expected = encode_blocks([(chunk_id, terms(text)) for chunk_id, text in chunks])
        stored = {
            (term, tier, block): PostingRow(first, max_tf, min_length, offsets, tfs)
            for term, tier, block, max_tf, min_length, first, offsets, tfs in conn.execute(
                # A row's tier is its max_tf's (migration 0023 stores no tier).
                "SELECT t.term, CASE WHEN p.max_tf >= 8 THEN 3 WHEN p.max_tf >= 4 THEN 2 WHEN p.max_tf >= 2 THEN 1"
                " ELSE 0 END, p.block_no, p.max_tf, p.min_length, p.first_offset, p.offsets, p.tfs"
                " FROM posting_blocks AS p JOIN bm25_terms AS t ON t.base_id = p.base_id AND t.term_id = p.term_id"
                " WHERE p.base_id = %s", (base.base_id,))
        }
        assert len(expected.rows) > 100 and any(r.offsets for r in expected.rows.values())
        assert {tier for _, tier, _ in expected.rows} == {0, 1, 2, 3}
        assert any(r.offsets and not r.tfs for r in expected.rows.values())  # several postings, one tf
        assert any(r.tfs for r in expected.rows.values())
        assert stored == expected.rows
        statistics = {term: (df, max_tf, min_length) for term, df, max_tf, min_length in conn.execute(
            "SELECT term, df, max_tf, min_length FROM bm25_terms WHERE base_id = %s", (base.base_id,))}
        assert statistics == {term: (expected.document_frequency[term], expected.max_tf[term],
                                     expected.min_length[term]) for term in expected.document_frequency}
