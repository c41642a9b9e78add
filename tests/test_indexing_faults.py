"""Indexing faults of issue 26: one over-long text, a FIFO or a swap while indexing, a full disk.

- one text the embedding service refuses never keeps the other chunks of a base from
  their vectors: its batch is bisected down to it, it is skipped with the service's
  reason, and the report and the base's status say how many chunks lack a vector and why;
- a title or heading of 100 kB is cut at reading, and an embedding text to the model's limit;
- a FIFO placed after the listing, or swapped in between a check and the open, is
  refused at once: the indexer never blocks;
- a file replaced between its hash and its parse cannot store one version's hash with
  the other's text: the bytes are read once;
- a disk too full for what a write needs stops the run with ``DISK_FULL`` before
  PostgreSQL runs out of space;
- the report counts the vectors written before the model stopped.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import metis_pg
from metis_pg import storage
from metis_pg.errors import DiskFull

from corpus import write_corpus
from model_servers import FakeService, embedding_service, openai_embeddings

DIM = 64


@pytest.fixture()
def fast_base(metis: metis_pg.Metis, base_name: str):
    """`base_name` created on a quick embedding service (hashed vectors)."""
    service = FakeService(embedding_service(DIM))
    try:
        metis.create_base(base_name, embedding_model="test-embed", embedding_url=service.url, embedding_dim=DIM)
        yield base_name
    finally:
        service.close()


def refusing(limit: int = 100_000, poison: str | None = None):
    """An embedding service answering 413 for a request holding a text over `limit` characters
    or holding `poison`, as ``metis eos serve`` answers TEXT_TOO_LONG."""
    calls = []

    def respond(path: str, body: Any):
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        calls.append(len(texts))
        if any(len(t) > limit or (poison and poison in t) for t in texts):
            return 413, {"error": {"code": "TEXT_TOO_LONG", "message": "a text is over the limit"}}
        return openai_embeddings(body, DIM)

    return respond, calls


def vectors_of(metis: metis_pg.Metis, base: str) -> tuple[int, int]:
    """(chunks, chunks with a vector of the base's model)."""
    with metis.pool.connection() as conn:
        row = storage.get_base(conn, base)
        return conn.execute(
            "SELECT (SELECT count(*) FROM chunks WHERE base_id = %(b)s),"
            " (SELECT count(DISTINCT chunk_id) FROM embeddings WHERE base_id = %(b)s)",
            {"b": row.base_id}).fetchone()


def test_one_text_the_model_refuses_is_skipped_and_the_others_get_their_vectors(metis, base_name, tmp_path):
    respond, calls = refusing(poison="POISONED")
    service = FakeService(respond)
    try:
        metis.create_base(base_name, embedding_model="test-embed", embedding_url=service.url, embedding_dim=DIM)
        docs = {f"doc{i:02d}.txt": f"Survey note {i} about the harbour." for i in range(40)}
        docs["doc17.txt"] = "Survey note 17: POISONED text the service refuses."
        folder = write_corpus(tmp_path / "kb", docs)
        first = metis.index(base_name, folder)
        second = metis.index(base_name, folder)  # it never stops at that batch again
    finally:
        service.close()
    assert vectors_of(metis, base_name) == (40, 39)
    assert first.chunks_embedded == 39 and first.chunks_without_vector == 1
    assert any("1 chunk was refused by the embedding model" in w and "doc17.txt" in w and "HTTP 413" in w
               for w in first.warnings), first.warnings
    assert second.chunks_without_vector == 1 and second.chunks_embedded == 0
    info = metis.base(base_name)
    assert info.chunks_without_vector == 1
    # Nothing left to wait for: the refused chunk is not sent again (issue 26, vector_notes).
    assert second.chunks_refused == 1 and info.status == "ready"


def test_a_title_of_100_kb_is_cut_at_reading_and_the_base_gets_every_vector(metis, base_name, tmp_path):
    respond, _ = refusing(limit=100_000)
    service = FakeService(respond)
    try:
        metis.create_base(base_name, embedding_model="test-embed", embedding_url=service.url, embedding_dim=DIM)
        folder = write_corpus(tmp_path / "kb", {
            "long-title.md": "# " + "Title words " * 9_000 + "\n\nThe body of the document.\n",
            "other.md": "# Other\n\nAnother document.\n",
        })
        report = metis.index(base_name, folder)
    finally:
        service.close()
    assert report.chunks_without_vector == 0 and report.status == "ready", report.warnings
    sent = [t for _, _, body in service.requests for t in body["input"]]
    assert max(len(t) for t in sent) < 5_000


def test_the_report_counts_the_vectors_written_before_the_model_stopped(metis, base_name, tmp_path):
    answered = []

    def respond(path: str, body: Any):  # the first batch of vectors (64 texts), then the model is down
        if sum(answered) >= 64:
            return 500, {"error": "down"}
        answered.append(len(body["input"]))
        return openai_embeddings(body, DIM)

    service = FakeService(respond)
    try:
        metis.create_base(base_name, embedding_model="test-embed", embedding_url=service.url, embedding_dim=DIM)
        folder = write_corpus(tmp_path / "kb", {f"doc{i:03d}.txt": f"Note {i}." for i in range(200)})
        report = metis.index(base_name, folder)
    finally:
        service.close()
    chunks, with_vector = vectors_of(metis, base_name)
    assert with_vector > 0 and report.chunks_embedded == with_vector
    assert report.chunks_without_vector == chunks - with_vector


# -- files that change under the indexer ---------------------------------------------------


def run_bounded(target, timeout_s: float = 60):
    """Run `target()` in a thread; return its result, or fail if it has not returned in `timeout_s`."""
    out: dict[str, Any] = {}

    def work():
        try:
            out["value"] = target()
        except BaseException as exc:  # noqa: BLE001
            out["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), f"still running after {timeout_s} s: the indexer hangs"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_a_fifo_placed_after_the_listing_is_refused_and_the_run_ends(metis, fast_base, tmp_path, monkeypatch):
    base_name = fast_base
    from metis_pg.indexing import sources

    folder = write_corpus(tmp_path / "kb", {"a.txt": "alpha text", "b.txt": "bravo text"})
    listed = sources.walk_source

    def listing_then_fifo(*args, **kwargs):
        files = list(listed(*args, **kwargs))
        (folder / "b.txt").unlink()
        os.mkfifo(folder / "b.txt")  # no writer: a blocking open waits for ever
        return iter(files)

    monkeypatch.setattr(sources, "walk_source", listing_then_fifo)
    report = run_bounded(lambda: metis.index(base_name, folder))
    assert report.new == 1
    assert [(f.path, f.reason) for f in report.failed] == [
        ("b.txt", f"{folder / 'b.txt'}: a FIFO (named pipe), not a regular file: skipped")]


def test_a_fifo_swapped_in_between_a_check_and_the_open_never_blocks(metis, fast_base, tmp_path, monkeypatch):
    base_name = fast_base
    folder = write_corpus(tmp_path / "kb", {"a.txt": "alpha text", "b.txt": "bravo text"})
    real_is_file = Path.is_file
    swapped = []

    def is_file_then_swap(self):  # the swap lands right after any is_file() check of b.txt
        answer = real_is_file(self)
        if self.name == "b.txt" and not swapped:
            swapped.append(1)
            self.unlink()
            os.mkfifo(self)
        return answer

    monkeypatch.setattr(Path, "is_file", is_file_then_swap)
    real_open = os.open

    def open_after_a_swap(path, flags, *args, **kwargs):  # ... or right before the open, if nothing checks
        if os.fspath(path).endswith("b.txt") and not swapped:
            swapped.append(1)
            os.unlink(path)
            os.mkfifo(path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_after_a_swap)
    report = run_bounded(lambda: metis.index(base_name, folder))
    assert swapped and report.new == 1
    assert "FIFO" in report.failed[0].reason or "not a regular file" in report.failed[0].reason


def test_a_file_replaced_between_its_hash_and_its_parse_stores_one_version(metis, fast_base, tmp_path, monkeypatch):
    base_name = fast_base
    from metis_pg.indexing import reading

    folder = write_corpus(tmp_path / "kb", {"notes.txt": "version A of the notes"})
    real = reading.read_document

    def read_after_a_swap(path, *args, **kwargs):  # an atomic replace lands between hash and parse
        replacement = folder / ".notes.tmp"
        replacement.write_text("version B of the notes", encoding="utf-8")
        os.replace(replacement, folder / "notes.txt")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(reading, "read_document", read_after_a_swap)
    metis.index(base_name, folder)
    monkeypatch.undo()
    with metis.pool.connection() as conn:
        stored_hash, text = conn.execute(
            "SELECT d.content_hash, string_agg(c.text, ' ') FROM documents d JOIN chunks c USING (document_id)"
            " JOIN bases b ON b.base_id = d.base_id WHERE b.name = %s GROUP BY d.content_hash",
            (base_name,)).fetchone()
    version = "A" if "version A" in text else "B"
    assert stored_hash.split(":")[0] == hashlib.sha256(f"version {version} of the notes".encode()).hexdigest()
    again = metis.index(base_name, folder)  # the file holds B now: never "unchanged" with A's text
    assert (again.changed, again.unchanged) == ((1, 0) if version == "A" else (0, 1))


# -- a full disk foreseen ------------------------------------------------------------------


def test_a_disk_too_full_for_the_next_write_stops_indexing_with_disk_full(metis, fast_base, tmp_path, monkeypatch):
    base_name = fast_base
    from metis_pg import disk_space

    folder = write_corpus(tmp_path / "kb", {f"doc{i}.txt": f"Note {i} of the survey." for i in range(5)})
    real = disk_space.shutil.disk_usage

    def nearly_full(path):
        usage = real(path)
        return usage._replace(free=900_000_000)  # under the 1 GB margin

    monkeypatch.setattr(disk_space.shutil, "disk_usage", nearly_full)
    with pytest.raises(DiskFull) as caught:
        metis.index(base_name, folder)
    message = caught.value.message
    assert "the database's disk is nearly full: 900 MB free in " in message and "pgdata" in message
    assert "this write needs about" in message
    assert re.search(r"[\d.]+ GB stay free for searches and the WAL \(METIS_DISK_FREE_MARGIN_BYTES", message), message
    assert caught.value.code == "DISK_FULL" and caught.value.exit_code == 9
    monkeypatch.undo()
    info = metis.base(base_name)
    assert info.status != "indexing" and info.documents == 0
    assert metis.index(base_name, folder).new == 5  # space freed: it indexes


def test_a_batch_the_disk_cannot_take_whole_is_written_in_parts_up_to_the_margin(metis, fast_base, tmp_path,
                                                                               monkeypatch):
    """A batch whose estimate would eat into the margin is not refused whole (issue 24): the documents
    that fit are written in smaller transactions, the run stops with DISK_FULL at the first that does
    not, and the next run indexes exactly the others. Before: nothing of the batch was written."""
    base_name = fast_base
    from metis_pg import disk_space
    from metis_pg.indexing import run as indexing_run

    folder = write_corpus(tmp_path / "kb", {f"doc{i:02d}.txt": f"Note {i} of the survey." for i in range(12)})
    real = disk_space.shutil.disk_usage
    room = {"bytes": int(5.5 * disk_space.BYTES_PER_CHUNK)}  # 5 one-chunk documents, not 6
    writes: list[int] = []

    def nearly_full(path):
        usage = real(path)
        margin = max(1_000_000_000, usage.total * 5 / 100, disk_space.MIN_MARGIN_BYTES)
        return usage._replace(free=int(margin) + room["bytes"])

    write_documents = indexing_run.storage.write_documents

    def written(conn, **kwargs):  # the disk fills as the guard foresaw
        ids = write_documents(conn, **kwargs)
        chunks = sum(len(d.chunks) for d in kwargs["documents"])
        writes.append(len(kwargs["documents"]))
        room["bytes"] -= chunks * disk_space.BYTES_PER_CHUNK
        return ids

    monkeypatch.setattr(disk_space.shutil, "disk_usage", nearly_full)
    monkeypatch.setattr(indexing_run.storage, "write_documents", written)
    with pytest.raises(DiskFull) as caught:
        metis.index(base_name, folder)
    assert caught.value.code == "DISK_FULL" and "this write needs about" in caught.value.message
    # 12 refused, 6 refused, 3 written; 9 → 4 refused, 2 written; 7 → 3, 1 refused: DISK_FULL.
    assert writes == [3, 2]
    info = metis.base(base_name)
    assert info.status != "indexing" and (info.documents, info.chunks) == (5, 5)
    monkeypatch.undo()
    again = metis.index(base_name, folder)  # space freed: the 7 others, none lost, none twice
    assert (again.new, again.unchanged) == (7, 5)
    assert metis.base(base_name).documents == 12


def test_metis_index_says_what_is_kept_and_what_continues_when_the_database_goes_away(dsn, metis, fast_base,
                                                                                       tmp_path, monkeypatch):
    """The database gone in the middle of `metis index` and not back: the batch in flight failed with exit 5
    and only "the database is unavailable: the server closed the connection"; now it says that what was
    written is kept and which command continues, and that command indexes exactly the rest. (A server
    that comes back within the wait is waited for: test_database_faults, the postmaster killed.)"""
    import psycopg

    from cli_runner import run_cli

    base_name = fast_base
    folder = write_corpus(tmp_path / "kb", {f"doc{i}.txt": f"Note {i} of the lighthouse survey." for i in range(6)})
    real = storage.write_documents
    calls = {"n": 0}

    def dropped(conn, **kwargs):  # the connection lost from the second batch on, as a server that stays away
        calls["n"] += 1
        if calls["n"] >= 2:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return real(conn, **kwargs)

    monkeypatch.setattr(storage, "write_documents", dropped)
    monkeypatch.setenv("METIS_DATABASE_WAIT_S", "0.5")  # waited for 4 x 0.5 s (db.while_gone)
    result = run_cli("index", str(folder), "--base", base_name, "--batch", "3", "--dsn", dsn)
    assert result.code == 5, (result.code, result.stderr)
    assert calls["n"] > 2  # written again while it waited
    assert "error [DATABASE_UNAVAILABLE]" in result.stderr and "every batch written before is kept" in result.stderr
    assert f"run `metis index {folder} --base {base_name}` again" in result.stderr, result.stderr
    monkeypatch.undo()
    assert metis.base(base_name).documents == 3
    again = run_cli("index", str(folder), "--base", base_name, "--json", "--dsn", dsn)
    assert again.code == 0 and (again.json()["new"], again.json()["unchanged"]) == (3, 3), again.stdout
    assert vectors_of(metis, base_name) == (6, 6)


def test_a_batch_committed_as_the_connection_was_lost_is_not_written_twice(metis, fast_base, tmp_path, monkeypatch):
    """The server gone just after a batch's COMMIT reached it: the client cannot tell whether it was
    written. When the server is back, the documents that transaction committed are not written again
    (their paths have their new content hashes); the run ends with each document once."""
    import psycopg

    folder = write_corpus(tmp_path / "kb", {f"doc{i}.txt": f"Note {i} of the lighthouse survey." for i in range(9)})
    real, calls = storage.write_documents, []

    def committed_then_lost(conn, **kwargs):
        calls.append([d.meta.path for d in kwargs["documents"]])
        ids = real(conn, **kwargs)
        if len(calls) == 2:
            conn.commit()
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return ids

    monkeypatch.setattr(storage, "write_documents", committed_then_lost)
    report = metis.index(fast_base, folder, batch_documents=3)
    assert len(calls) == 3 and sorted(p for c in calls for p in c) == [f"doc{i}.txt" for i in range(9)]
    assert (report.new, report.chunks) == (9, 9)
    assert vectors_of(metis, fast_base) == (9, 9)
    with metis.pool.connection() as conn:
        paths = [r[0] for r in conn.execute(
            "SELECT d.path FROM documents AS d JOIN bases AS b ON b.base_id = d.base_id WHERE b.name = %s",
            (fast_base,)).fetchall()]
    assert sorted(paths) == [f"doc{i}.txt" for i in range(9)]
