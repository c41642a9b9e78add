"""The indexer writes a full batch in a thread while the next documents are read (issue 24, item 3).

``metis_pg.indexing.run.Batch`` against a real PostgreSQL: a batch handed over is written by a
thread of its own (the server's work on one core, the caller tokenizing on the other), batches are
written in order and never two at once, and an error of a write is raised in the caller's thread.
"""

from __future__ import annotations

import random
import sys
import threading

import numpy as np
import psycopg
import pytest

from metis_pg import db, storage
from metis_pg.chunking import Chunk
from metis_pg.config import BaseSpec, Settings
from metis_pg.indexing import run as indexing_run
from metis_pg.storage import BLOCK_CHUNKS, postings


def _document(i: int, chunks: int = 1) -> storage.PendingDocument:
    parts = [Chunk(ordinal=k, text=f"lantern {i} harbour {k}", title="", headings=(), page=None, line=1 + k,
                   char_start=0, char_end=20) for k in range(chunks)]
    return storage.PendingDocument(storage.DocumentMeta(f"d{i:03d}.txt", "", "txt", f"h{i}", 20), parts)


@pytest.fixture()
def target(dsn, base_name):
    """(pool, base_id, source_id) of a new base."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        base = storage.create_base(conn, base_name, "documents", BaseSpec().to_json())
        source_id = storage.ensure_source(conn, base.base_id, "s", None)
    pool = db.open_pool(dsn, settings=Settings.from_env(), max_size=4)
    try:
        yield pool, base.base_id, source_id
    finally:
        pool.close()


class Refused(Exception):
    """An error of a write."""


def _stored(pool, base_id: int) -> list[str]:
    with pool.connection() as conn:
        return [r[0] for r in conn.execute("SELECT path FROM documents WHERE base_id = %s ORDER BY path", (base_id,))]


def test_a_full_batch_is_written_in_a_thread_while_the_next_documents_are_added(target, monkeypatch):
    pool, base_id, source_id = target
    release, entered = threading.Event(), threading.Event()
    writes: list[tuple[list[str], bool]] = []
    write_documents = indexing_run.storage.write_documents

    def held(conn, **kwargs):  # the first write waits until the caller has added the next documents
        in_main = threading.current_thread() is threading.main_thread()
        writes.append(([d.meta.path for d in kwargs["documents"]], in_main))
        entered.set()
        if len(writes) == 1:
            release.wait(timeout=20)
        return write_documents(conn, **kwargs)

    monkeypatch.setattr(indexing_run, "BATCH_CHUNKS", 3)
    monkeypatch.setattr(indexing_run.storage, "write_documents", held)
    run = indexing_run.Run(base="b", base_id=base_id)
    before = sys.getswitchinterval()
    with indexing_run.Batch(pool, base_id, source_id, "m:3", run, max_documents=100) as batch:
        for i in range(3):
            batch.add(_document(i))  # the third fills the batch: handed to the writer
        # Back here while the first batch is still being written (before: add() wrote it itself and
        # waited 20 s for this event, which nothing could set).
        assert entered.wait(timeout=20)
        assert not release.is_set() and writes == [(["d000.txt", "d001.txt", "d002.txt"], False)]
        # While a batch is written the reading thread gives the GIL back often (the writer waits on
        # the server many times a batch; at Python's 5 ms the two threads ran one after the other).
        assert sys.getswitchinterval() == indexing_run.WRITING_SWITCH_INTERVAL_S < before
        batch.add(_document(3))
        batch.add(_document(4))
        assert _stored(pool, base_id) == []  # nothing committed yet
        release.set()
        batch.write()  # the rest, after the first; waits for both
    assert [w for w, _ in writes] == [["d000.txt", "d001.txt", "d002.txt"], ["d003.txt", "d004.txt"]]
    assert _stored(pool, base_id) == [f"d{i:03d}.txt" for i in range(5)]
    assert run.counts["chunks"] == 5 and run.counts["new"] == 5
    assert sys.getswitchinterval() == before  # put back once no write is in flight


def test_an_error_of_the_writer_is_raised_in_the_callers_thread_and_later_batches_are_not_written(target,
                                                                                                    monkeypatch):
    pool, base_id, source_id = target
    write_documents = indexing_run.storage.write_documents
    calls: list[int] = []

    def failing(conn, **kwargs):
        calls.append(len(kwargs["documents"]))
        if len(calls) == 1:
            raise Refused("the first batch")
        return write_documents(conn, **kwargs)

    monkeypatch.setattr(indexing_run, "BATCH_CHUNKS", 2)
    monkeypatch.setattr(indexing_run.storage, "write_documents", failing)
    run = indexing_run.Run(base="b", base_id=base_id)
    with pytest.raises(Refused, match="the first batch"):
        with indexing_run.Batch(pool, base_id, source_id, "m:3", run, max_documents=100) as batch:
            for i in range(6):
                batch.add(_document(i))  # the batch after the failed one is never handed over
    assert calls == [2] and _stored(pool, base_id) == []


def _random_terms(rng: random.Random, chunks: int) -> list[list[str]]:
    words = [f"w{k}" for k in range(60)]
    return [[rng.choice(words[: rng.randint(1, 60)]) for _ in range(rng.choice([0, 1, 5, 40, 200]))]
            for _ in range(chunks)]


def test_a_batch_encoded_before_its_chunk_ids_are_drawn_is_the_encoding_of_its_chunks():
    # The indexer encodes a batch while the one before is written (chunk k at relative block k // 256),
    # then moves it to the blocks drawn: the same columns as encoding the chunks with their real ids.
    rng = random.Random(3)
    terms = _random_terms(rng, 700)  # three blocks
    blocks = [5, 9, 10]
    ids = [blocks[k // BLOCK_CHUNKS] * BLOCK_CHUNKS + k % BLOCK_CHUNKS for k in range(len(terms))]
    expected = postings.encode_columns(list(zip(ids, terms)))
    placed = postings.place_batch(postings.encode_batch(terms), blocks)
    for name in ("term", "tier", "block_no", "max_tf", "min_length", "first_offset", "starts", "offsets", "tfs",
                 "document_frequency", "term_max_tf", "term_min_length"):
        assert np.array_equal(getattr(placed, name), getattr(expected, name)), name
    assert (placed.terms, placed.lengths, placed.chunks, placed.total_terms) == \
        (expected.terms, expected.lengths, expected.chunks, expected.total_terms)


def test_rows_written_from_a_batch_encoded_ahead_equal_those_written_from_its_chunks(dsn, base_name):
    rng = random.Random(5)
    terms = _random_terms(rng, 600)
    documents = []
    for i in range(0, len(terms), 40):
        chunks = [Chunk(ordinal=k, text=" ".join(t), title="", headings=(), page=None, line=1, char_start=0,
                        char_end=1) for k, t in enumerate(terms[i:i + 40])]
        documents.append(storage.PendingDocument(storage.DocumentMeta(f"d{i}.txt", "", "txt", f"h{i}", 1), chunks,
                                                 terms=terms[i:i + 40]))
    rows = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, ahead in ((base_name, None), (base_name + "-ahead", postings.encode_batch(terms))):
            base = storage.create_base(conn, name, "documents", BaseSpec().to_json())
            source_id = storage.ensure_source(conn, base.base_id, "s", None)
            storage.write_documents(conn, base_id=base.base_id, source_id=source_id, model="m:3",
                                    documents=documents, postings=ahead)
            # Every column but the ids, blocks by their rank in the base: the two bases drew other blocks.
            rows[name] = conn.execute(
                "SELECT t.term, dense_rank() OVER (ORDER BY p.block_no),"
                " to_jsonb(p) - 'base_id' - 'term_id' - 'block_no' AS rest, t.df, t.max_tf, t.min_length"
                " FROM posting_blocks AS p JOIN bm25_terms AS t USING (base_id, term_id) WHERE p.base_id = %s"
                " ORDER BY 1, 2, 3", (base.base_id,)).fetchall()
            # ... and in the blocks of the base's chunks (not the relative ones it was encoded with).
            assert conn.execute(
                "SELECT count(*) FROM (SELECT block_no FROM posting_blocks WHERE base_id = %(b)s UNION"
                " SELECT block_no FROM block_lengths WHERE base_id = %(b)s) AS r WHERE r.block_no NOT IN"
                " (SELECT chunk_id / 256 FROM chunks WHERE base_id = %(b)s)", {"b": base.base_id}).fetchone()[0] == 0
            rows[name, "lengths"] = conn.execute(
                "SELECT lengths FROM block_lengths WHERE base_id = %s ORDER BY block_no", (base.base_id,)).fetchall()
        storage.drop_base(conn, base_name + "-ahead")
    assert len(rows[base_name]) > 500
    assert rows[base_name] == rows[base_name + "-ahead"]
    assert rows[base_name, "lengths"] == rows[base_name + "-ahead", "lengths"]
