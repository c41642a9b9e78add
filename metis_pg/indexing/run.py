"""One indexing run's tally (:class:`Run`) and the batches it writes its documents in (:class:`Batch`)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from .. import db, storage
from ..disk_space import BYTES_PER_CHUNK, DiskGuard
from ..results import FailedDocument

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
#: its maximum of documents, or its first document has waited this many seconds. Larger batches
#: cost less CPU per chunk (2,000: ~25% less than 500, docs/performance.md 2026-12-04), but the disk
#: guard reserves disk_space.BYTES_PER_CHUNK for every chunk of a batch before writing it, so on a
#: small disk a larger batch stops indexing sooner (tests/test_full_disk.py): 500 kept.
BATCH_CHUNKS = 500
BATCH_SECONDS = 1.0


class Batch:
    """Documents read, waiting to be written in one transaction.

    Writing many small documents at once costs one update of the base's BM25
    statistics instead of one per document (docs/performance.md). A document is
    searchable by its words at most about a second after it was read, and a process
    killed before :meth:`write` loses only the unwritten batch: the next ``metis index``
    reads those files again, as they are still new or changed.
    """

    def __init__(self, pool: db.Pool, base_id: int, source_id: int, model: str, run: Run, *,
                 max_documents: int, guard: DiskGuard | None = None) -> None:
        self._pool, self._base_id, self._source_id, self._model, self._run = pool, base_id, source_id, model, run
        self._guard = guard
        self._max_documents = max_documents
        self._pending: list[storage.PendingDocument] = []
        self._chunks = 0
        self._since = 0.0

    def add(self, document: storage.PendingDocument) -> None:
        """Queue a document; write the batch once it is full or has waited long enough."""
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
        """Write the batch if it is full or its first document has waited long enough."""
        if self._pending and (self._chunks >= BATCH_CHUNKS or len(self._pending) >= self._max_documents
                              or time.monotonic() - self._since >= BATCH_SECONDS):
            self.write()

    def write(self) -> None:
        """Write the queued documents in one transaction."""
        if not self._pending:
            return
        if self._guard is not None:  # DISK_FULL before PostgreSQL runs out of space (metis_pg.disk_space)
            self._guard.check_pool(self._pool, self._chunks * BYTES_PER_CHUNK)
        with self._pool.connection() as conn:
            storage.write_documents(conn, base_id=self._base_id, source_id=self._source_id,
                                    documents=self._pending, model=self._model)
        self._pending, self._chunks = [], 0
