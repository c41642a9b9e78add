"""One indexing run's tally (:class:`Run`) and the batches it writes its documents in (:class:`Batch`)."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import db, storage
from ..disk_space import BYTES_PER_CHUNK, DiskGuard
from ..errors import DiskFull
from ..reports import FailedDocument

__all__ = ["BATCH_CHUNKS", "BATCH_SECONDS", "Batch", "Run"]


@dataclass
class Run:
    """What one indexing run did so far.

    Attributes:
        counts: the counters of :class:`~metis_pg.results.IndexReport` by name (``read``, ``new``,
            ``changed``, ``unchanged``, ``deleted``, ``chunks``, ``chunks_embedded``, ``vectors_reused``).
    """

    base: str
    base_id: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    failed: list[FailedDocument] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    model_down: str | None = None


#: A batch of documents is written (one transaction) once it holds this many chunks,
#: its maximum of documents, or its first document has waited this many seconds. Chosen by
#: measurement (benchmarks/ingest_cpu.py; docs/performance.md, "Batches of 2,000 chunks written
#: while the next are read"): every batch updates the BM25 statistics of each of its terms once, so
#: larger batches cost less CPU per chunk; past ~2,000 chunks the wall time grows again. A batch the
#: disk guard cannot fit is written in smaller transactions (:meth:`Batch._write`), so a small disk
#: does not stop indexing sooner.
BATCH_CHUNKS = 2000
BATCH_SECONDS = 1.0


#: The interpreter's thread switch interval while a batch is written (seconds; Python's default is
#: 0.005). The writer thread waits on the server many times per batch and needs the GIL back each
#: time, while the reading thread tokenizes without a pause: at 5 ms a time the writer queued behind
#: it and the two threads ran one after the other (measured at load 1.3, benchmarks/ingest_cpu.py
#: --indexer: 1,955 chunks/s at 5 ms, 2,250 at 0.5 ms; docs/performance.md).
WRITING_SWITCH_INTERVAL_S = 0.0005

_writes_lock = threading.Lock()
_writes_in_flight = 0
_saved_interval: float | None = None


def _writing(started: bool) -> None:
    """Count a batch write starting (True) or ending (False): while any is in flight the switch
    interval is at most :data:`WRITING_SWITCH_INTERVAL_S`; the last to end puts the previous one back."""
    global _writes_in_flight, _saved_interval
    with _writes_lock:
        if started:
            _writes_in_flight += 1
            if _writes_in_flight == 1:
                _saved_interval = sys.getswitchinterval()
                sys.setswitchinterval(min(_saved_interval, WRITING_SWITCH_INTERVAL_S))
        else:
            _writes_in_flight -= 1
            if _writes_in_flight == 0 and _saved_interval is not None:
                sys.setswitchinterval(_saved_interval)
                _saved_interval = None


class Batch:
    """Documents read, waiting to be written in one transaction; written while the next are read.

    Writing many small documents at once costs one update of the base's BM25
    statistics instead of one per document (docs/performance.md). A document is
    searchable by its words at most about a second after it was read, and a process
    killed before :meth:`write` loses only the unwritten batch: the next ``metis index``
    reads those files again, as they are still new or changed.

    A full batch is written by a thread of its own while the caller reads, chunks and
    tokenizes the next one (the server's work of one batch and the client's of the next on
    two cores): at most one batch is being written and one filling. Batches are still
    written one after the other, in order; an error of a write (``DISK_FULL``, the database)
    is raised by the next call that hands a batch over or waits (:meth:`write_if_due`,
    :meth:`add`, :meth:`write`, leaving the ``with`` block). Use it as a context manager:
    leaving the block waits for the write in flight (a process ending otherwise would still
    finish it: the thread is not a daemon, and the transaction commits whole or not at all).
    """

    def __init__(self, pool: db.Pool, base_id: int, source_id: int, model: str, run: Run, *,
                 max_documents: int, guard: DiskGuard | None = None,
                 regain: Callable[[], None] | None = None) -> None:
        self._pool, self._base_id, self._source_id, self._model, self._run = pool, base_id, source_id, model, run
        self._guard = guard
        self._regain = regain
        self._max_documents = max_documents
        self._pending: list[storage.PendingDocument] = []
        self._chunks = 0
        self._since = 0.0
        self._writing: tuple[threading.Thread, list[BaseException]] | None = None

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, kind, error, trace) -> None:
        if error is None:
            self._wait()
        else:  # the caller's error is the one to report; the write in flight still ends
            with contextlib.suppress(Exception):
                self._wait()

    def add(self, document: storage.PendingDocument) -> None:
        """Queue a document; hand the batch to the writer once it is full or has waited long enough."""
        if not self._pending:
            self._since = time.monotonic()
        self._pending.append(document)
        self._chunks += len(document.chunks)
        # Counted when queued, so progress moves with reading; a failed write raises anyway.
        self._run.counts["chunks"] += len(document.chunks)
        if document.replaces is None:
            self._run.counts["new"] += 1
        else:
            self._run.counts["changed"] += 1
        self.write_if_due()

    def write_if_due(self) -> None:
        """Hand the batch to the writer if it is full or its first document has waited long enough
        (after the batch before it is written)."""
        if self._pending and (self._chunks >= BATCH_CHUNKS or len(self._pending) >= self._max_documents
                              or time.monotonic() - self._since >= BATCH_SECONDS):
            self._hand_over()

    def write(self) -> None:
        """Write the queued documents and wait until every batch handed over is written.

        Raises:
            DiskFull: the next document does not fit (:meth:`_write`); or the error of any write.
        """
        if self._pending:
            self._hand_over()
        self._wait()

    def _hand_over(self) -> None:
        """Start writing the queued documents in a thread, once the batch before them is written."""
        documents, self._pending, self._chunks = self._pending, [], 0
        # Encoded here, while the batch before is still being written (then waited for): off the writer's path.
        postings = storage.encode_batch([terms for d in documents for terms in d.terms])
        self._wait()
        errors: list[BaseException] = []

        def write() -> None:
            try:
                self._write(documents, postings)
            except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread by _wait
                errors.append(exc)
            finally:
                _writing(False)

        _writing(True)
        thread = threading.Thread(target=write, name="metis-index-write")
        try:
            thread.start()
        except BaseException:
            _writing(False)
            raise
        self._writing = (thread, errors)

    def _wait(self) -> None:
        """Wait for the write in flight; raise its error."""
        if self._writing is not None:
            (thread, errors), self._writing = self._writing, None
            thread.join()
            if errors:
                raise errors[0]

    def _write(self, documents: list[storage.PendingDocument], postings: storage.PostingColumns | None = None
               ) -> None:
        """Write `documents` in one transaction, or in several when the disk cannot take them all.

        `postings`: :func:`metis_pg.storage.encode_batch` of all of `documents` (used when they are
        written whole).

        The disk guard estimates the whole batch (:data:`~metis_pg.disk_space.BYTES_PER_CHUNK` per
        chunk); when that would eat into the margin, the first half of the documents is tried, and
        so on: what fits is written, then the rest is asked for again (the free space measured again).
        A single document that does not fit stops the run with ``DISK_FULL``: every document written
        before it is kept, and it and the documents after it are still new or changed, so the next
        ``metis index`` reads them again (nothing is lost).

        A transaction the server went away in (killed, restarted) is written again once it is back
        (:func:`metis_pg.db.while_gone`; the pool's next checkout restarts an embedded server):
        the indexer lock is held again first (`regain`), and the documents that transaction
        committed before the connection was lost are not written twice (:meth:`_unwritten`).

        Raises:
            DiskFull: the next document does not fit (metis_pg.disk_space).
            DatabaseUnavailable: the server did not come back within the wait, or refused the write.
        """
        while documents:
            n = self._fitting(documents)
            part = documents[:n]
            encoded = postings if n == len(documents) else None
            for attempt in db.while_gone(self._pool.settings, "writing a batch of documents"):
                with attempt:
                    if attempt.retry_state.attempt_number > 1:
                        part, encoded = self._unwritten(part), None
                    if part:
                        with self._pool.connection() as conn:
                            storage.write_documents(conn, base_id=self._base_id, source_id=self._source_id,
                                                    documents=part, model=self._model, postings=encoded)
            documents, postings = documents[n:], None  # the rest (if any) encoded as it is written

    def _unwritten(self, documents: list[storage.PendingDocument]) -> list[storage.PendingDocument]:
        """After the server went away during a write: hold the indexer lock again, and return the
        `documents` the lost transaction did not commit (a document is written when its path now
        has its content hash under another id than the version it replaces)."""
        with self._pool.connection() as conn:  # a checkout first: it restarts an embedded server that died
            stored = storage.document_hashes(conn, self._source_id)
        if self._regain is not None:
            self._regain()
        return [d for d in documents if not ((d.meta.path in stored) and stored[d.meta.path][0] != d.replaces
                                             and stored[d.meta.path][1] == d.meta.content_hash)]

    def _fitting(self, documents: list[storage.PendingDocument]) -> int:
        """How many of `documents`, from the first, the disk guard lets one transaction write:
        all of them, else the first half, quarter, ... (one check each).

        Raises:
            DiskFull: not even the first document fits.
        """
        n = len(documents)
        if self._guard is None:  # DISK_FULL before PostgreSQL runs out of space (metis_pg.disk_space)
            return n
        while True:
            try:
                self._guard.check_pool(self._pool, sum(len(d.chunks) for d in documents[:n]) * BYTES_PER_CHUNK)
                return n
            except DiskFull:
                if n == 1:
                    raise
                n //= 2
