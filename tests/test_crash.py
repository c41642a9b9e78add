"""Crash safety (SPEC F3): `metis index` killed with SIGKILL mid-run, several times, then run to the end.

The indexer runs with `--batch 1` (a transaction per document) and embeds 4
chunks per transaction (``METIS_EMBED_BATCH_CHUNKS``), so that the kills fall
between many commits of both phases (words, then vectors); a batch of several
documents is one transaction all the same.

Three kills come at a random moment after the run committed 1 to 3 new
documents or batches of vectors; one comes while the indexer's transaction is
writing (its backend has a transaction id). After each kill the base is
searchable and consistent (BM25 statistics equal a recount of its postings;
chunks without a vector are counted and the base says ``waiting``) and no
longer shows ``indexing``; the run that is not killed finishes the job, and the
base then holds exactly what a clean index of the same folder holds.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from corpus import write_corpus
from test_incremental import bm25_state

#: When each kill comes: a random moment, or while a document's transaction is writing.
KILLS = ("random", "random", "random", "writing")
APPLICATION = "metis-crash-test"
#: Enough that what is left after the kills takes longer than the longest random delay to index.
DOCUMENTS = 60
WORDS = ("harbour", "granite", "lantern", "meadow", "copper", "orchard", "glacier", "violet", "falcon", "ember")


def unique_word(i: int) -> str:
    """A made-up word only document `i` holds: ``kwaazu``, ``kwabzu``, ..."""
    return f"kw{'abcdefghij'[i // 10]}{'abcdefghij'[i % 10]}zu"


def corpus() -> dict[str, str]:
    """DOCUMENTS short documents of one chunk each; doc NN holds the word ``unique_word(NN)``."""
    return {
        f"doc{i:02d}.txt": f"Record {i}: the {WORDS[i % 10]} survey lists {unique_word(i)} near the {WORDS[(i * 3) % 10]} road."
        for i in range(DOCUMENTS)
    }


def start_indexer(dsn: str, base: str, folder: Path, batch: int = 1) -> subprocess.Popen:
    """`metis index` in a new process whose database sessions are named APPLICATION."""
    named = f"{dsn}{'&' if '?' in dsn else '?'}application_name={APPLICATION}"
    return subprocess.Popen(
        [sys.executable, "-m", "metis_pg.cli", "index", str(folder), "--base", base, "--dsn", named, "--json",
         "--batch", str(batch)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "METIS_EMBED_BATCH_CHUNKS": "4"},
    )


def index_to_the_end(dsn: str, base: str, folder: Path, batch: int = 1) -> dict:
    """Run `metis index` to its end, not killed; return its JSON report."""
    proc = start_indexer(dsn, base, folder, batch)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return json.loads(out)


def assert_same_as_a_clean_index(metis, base: str, folder: Path) -> None:
    """The base holds exactly what indexing `folder` into a new base gives (BM25 statistics recounted)."""
    clean = base + "-clean"
    try:
        metis.index(clean, folder)
        assert bm25_state(metis, base) == bm25_state(metis, clean)
    finally:
        metis.drop_base(clean)


def sessions_gone(conn) -> bool:
    """Whether every database session of the killed indexer has ended.

    Its lock session can end before another of its sessions finishes a COMMIT the
    server had already received: the state is read once all of them are gone.
    """
    return conn.execute(
        "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name IN (%s, 'metis indexer')",
        (APPLICATION,),
    ).fetchone()[0]


def writing(conn) -> bool:
    """Whether a session of the indexer is in a transaction that has written (has a transaction id)."""
    return conn.execute(
        "SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = %s AND backend_xid IS NOT NULL",
        (APPLICATION,),
    ).fetchone()[0]


def documents(metis, base: str) -> int:
    with metis.pool.connection() as conn:
        row = conn.execute(
            "SELECT count(*) FROM documents d JOIN bases b USING (base_id) WHERE b.name = %s", (base,)
        ).fetchone()
    return row[0]


def work(metis, base: str) -> int:
    """Documents plus chunks with a vector of a base: what both phases have committed."""
    with metis.pool.connection() as conn:
        return conn.execute(
            "SELECT (SELECT count(*) FROM documents d JOIN bases b USING (base_id) WHERE b.name = %(b)s)"
            " + (SELECT count(*) FROM embeddings e JOIN bases b USING (base_id) WHERE b.name = %(b)s)",
            {"b": base},
        ).fetchone()[0]


def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(0.05)


def test_sigkill_during_indexing_then_reindex_matches_a_clean_index(metis, base_name, tmp_path):
    folder = write_corpus(tmp_path / "kb", corpus())
    rng = random.Random()
    runs = []
    committed = 0
    watcher = psycopg.connect(metis.dsn, autocommit=True)
    for kill, when in enumerate(KILLS, start=1):
        proc = start_indexer(metis.dsn, base_name, folder)
        in_write = False
        try:
            # Wait until the run has committed 1 to 3 new documents or batches of vectors.
            target = committed + rng.randint(1, 3)
            wait_for(lambda: work(metis, base_name) >= target or proc.poll() is not None, 120,
                     "the indexer to commit documents or vectors")
            assert proc.poll() is None, f"the indexer ended before kill {kill}: {proc.communicate()}"
            assert metis.base(base_name).status == "indexing"  # another process holds the base
            seen = documents(metis, base_name)
            answer = metis.search(base_name, "survey", mode="keyword", top_k=DOCUMENTS)
            assert len(answer.results) >= seen  # searches answer from what is committed
            if when == "random":
                delay_s = rng.uniform(0.0, 0.5)  # somewhere in the next document's read, embed or write
                time.sleep(delay_s)
            else:
                # Phase 2 writes a few vectors per transaction (milliseconds between seconds of
                # embedding): poll without sleeping. If the run ends first, this kill found nothing
                # left to interrupt (test_sigkill_inside_a_batch_of_documents kills inside a write too).
                started = time.monotonic()
                while not (in_write := writing(watcher)) and proc.poll() is None:
                    assert time.monotonic() - started < 120, "the indexer never wrote"
                delay_s = time.monotonic() - started
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.returncode == 0:  # the run ended before the kill: nothing was interrupted
            runs.append({"kill": kill, "when": when, "finished_before_the_kill": True})
            committed = work(metis, base_name)
            break
        assert proc.returncode == -signal.SIGKILL
        # The dead process's connection and lock go away; the base is no longer 'indexing'.
        wait_for(lambda: metis.base(base_name).status != "indexing", 30, "the killed indexer's lock to go")
        wait_for(lambda: sessions_gone(watcher), 30, "the killed indexer's sessions to end")
        info = metis.base(base_name)
        state = bm25_state(metis, base_name)
        assert state["documents"] == state["chunks"] and state["embeddings"] <= state["chunks"]
        assert info.chunks_without_vector == state["chunks"] - state["embeddings"]
        assert (info.status, info.interrupted) == ("waiting" if info.chunks_without_vector else "ready", True)
        assert target <= state["documents"] + state["embeddings"] < 2 * DOCUMENTS
        runs.append({"kill": kill, "when": when, "work_seen": target, "then_s": round(delay_s, 2),
                     "in_write": in_write, "documents_committed": state["documents"],
                     "vectors_committed": state["embeddings"]})
        committed = state["documents"] + state["embeddings"]
        hits = metis.search(base_name, unique_word(0), mode="keyword").results
        assert [r.citation.document for r in hits] == ["doc00.txt"]
    watcher.close()

    report = index_to_the_end(metis.dsn, base_name, folder)
    done = documents(metis, base_name) - report["new"]
    assert (report["new"], report["unchanged"], report["failed"], report["status"]) == (
        DOCUMENTS - done, done, [], "ready")
    assert report["chunks_embedded"] == DOCUMENTS - (committed - done)  # only the chunks without a vector
    runs.append({"final": True, "new": report["new"], "unchanged": report["unchanged"]})
    print("SIGKILL runs:", runs)

    assert_same_as_a_clean_index(metis, base_name, folder)
    info = metis.base(base_name)
    assert (info.status, info.interrupted, info.documents, info.chunks) == ("ready", False, DOCUMENTS, DOCUMENTS)
    for i in (0, 17, 29):
        hits = metis.search(base_name, unique_word(i), mode="keyword").results
        assert [r.citation.document for r in hits] == [f"doc{i:02d}.txt"]


def copying(conn) -> bool:
    """Whether a session of the indexer is inside a transaction that writes documents (a COPY)."""
    return conn.execute(
        "SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = %s AND backend_xid IS NOT NULL"
        " AND query LIKE 'COPY %%'",
        (APPLICATION,),
    ).fetchone()[0]


def test_sigkill_inside_a_batch_of_documents_loses_only_that_batch(metis, base_name, tmp_path):
    folder = write_corpus(tmp_path / "kb", corpus())
    metis.create_base(base_name)
    watcher = psycopg.connect(metis.dsn, autocommit=True)
    proc = start_indexer(metis.dsn, base_name, folder, batch=100)
    try:
        started = time.monotonic()
        while not copying(watcher):  # the transaction writing a batch of several documents
            assert proc.poll() is None and time.monotonic() - started < 120, "the indexer never wrote"
            time.sleep(0.002)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        watcher.close()
    wait_for(lambda: metis.base(base_name).status != "indexing", 30, "the killed indexer's lock to go")
    with psycopg.connect(metis.dsn, autocommit=True) as after:
        wait_for(lambda: sessions_gone(after), 30, "the killed indexer's sessions to end")
    state = bm25_state(metis, base_name)  # consistent: statistics equal a recount of the postings
    assert state["documents"] == state["chunks"] and state["embeddings"] < DOCUMENTS  # words or vectors were cut

    report = index_to_the_end(metis.dsn, base_name, folder, batch=100)
    assert (report["new"], report["unchanged"]) == (DOCUMENTS - state["documents"], state["documents"])
    assert_same_as_a_clean_index(metis, base_name, folder)
