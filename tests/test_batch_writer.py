"""The indexer writes a full batch in a thread while the next documents are read (issue 24, item 3).

``metis_pg.indexing.run.Batch`` against a real PostgreSQL: a batch handed over is written by a
thread of its own (the server's work on one core, the caller tokenizing on the other), batches are
written in order and never two at once, and an error of a write is raised in the caller's thread.
"""

from __future__ import annotations

import threading

import psycopg
import pytest

from metis_pg import db, storage
from metis_pg.chunking import Chunk
from metis_pg.config import BaseSpec, Settings
from metis_pg.indexing import run as indexing_run


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
    with indexing_run.Batch(pool, base_id, source_id, "m:3", run, max_documents=100) as batch:
        for i in range(3):
            batch.add(_document(i))  # the third fills the batch: handed to the writer
        # Back here while the first batch is still being written (before: add() wrote it itself and
        # waited 20 s for this event, which nothing could set).
        assert entered.wait(timeout=20)
        assert not release.is_set() and writes == [(["d000.txt", "d001.txt", "d002.txt"], False)]
        batch.add(_document(3))
        batch.add(_document(4))
        assert _stored(pool, base_id) == []  # nothing committed yet
        release.set()
        batch.write()  # the rest, after the first; waits for both
    assert [w for w, _ in writes] == [["d000.txt", "d001.txt", "d002.txt"], ["d003.txt", "d004.txt"]]
    assert _stored(pool, base_id) == [f"d{i:03d}.txt" for i in range(5)]
    assert run.counts["chunks"] == 5 and run.counts["new"] == 5


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
