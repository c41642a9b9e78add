"""Phase 1 for one document: read → chunk → tokenize, into a :class:`~metis_pg.storage.PendingDocument`.

:func:`read_file` does it for a file of a source (skipping an unchanged one, recording an
unreadable one in the run with its reason: one file never stops a run, issue 13);
:func:`own_document` for a document the base holds itself (a note, a fact).
:mod:`.pipeline` writes what they return.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import psycopg

from .. import db, storage
from ..chunking import Chunk, chunk_document, chunk_terms, embedding_text
from ..config import BaseSpec, Settings
from ..errors import DatabaseUnavailable, UnreadableDocument
from ..readers import budget_left, display_path, kind_of, read_document, read_file_once, time_budget, versioned_hash
from ..readers.document import Document
from ..reports import FailedDocument
from . import sources
from .run import Run

__all__ = ["failure_reason", "own_document", "read_file", "tokenize"]

log = logging.getLogger(__name__)


def tokenize(chunks: Sequence[Chunk], field_weight: int = 1) -> list[list[str]]:
    """Return the BM25 terms of each chunk (:func:`metis_pg.chunking.chunk_terms`), the heading
    path's words counted `field_weight` times (``BaseSpec.field_weight``)."""
    return [chunk_terms(c, field_weight) for c in chunks]


def read_file(
    pool: db.Pool,
    settings: Settings,
    spec: BaseSpec,
    run: Run,
    path: Path,
    root: Path,
    rel: str,
    known: tuple[int, str] | None,
    budget_s: float | None = None,
    *,
    retokenize: bool = False,
) -> storage.PendingDocument | None:
    """Read and chunk a new or changed file; None when it is unchanged or unreadable.

    With `retokenize` (the base's postings are an older tokenizer's) an unchanged file
    is read again too, and counted as changed.

    Its chunks carry the vectors of the chunk texts its indexed version already
    had, and None for the others (embedded in phase 2).

    Any exception while reading or chunking the file, except a database error,
    puts it in ``run.failed`` with a reason naming it (:func:`failure_reason`);
    a file already indexed keeps its indexed version.
    """
    shown = display_path(str(path))
    try:
        with time_budget(budget_s, str(path), per_mb_s=settings.file_time_per_mb_s,
                         per_page_s=settings.file_time_per_page_s):
            # One read of the bytes, then hashed and parsed: a file replaced meanwhile cannot store
            # one version's hash with the other's text. Opened without blocking or following a link
            # swapped in since the listing, and only if it is a regular file (readers.files).
            left = budget_left()
            data = read_file_once(str(sources.final_target(path, root)), max_bytes=spec.max_file_bytes,
                                  timeout_s=None if left is None else max(left, 2.0),
                                  too_large=lambda n: f"{n:,} bytes is over the limit of {spec.max_file_bytes:,} bytes")
            size = len(data)
            modified_at = _modified_at(path)
            content_hash = versioned_hash(hashlib.sha256(data).hexdigest(), kind_of(path))
            if known is not None and known[1] == content_hash and not retokenize:
                run.counts["unchanged"] += 1
                return None
            document = read_document(path, max_bytes=spec.max_file_bytes, data=data,
                                     max_title_chars=settings.title_max_chars)
            del data
            chunks = chunk_document(document, chunk_size=spec.chunk_size)
    except (psycopg.Error, DatabaseUnavailable):
        raise
    except Exception as exc:  # noqa: BLE001 - one file never ends the run (module docstring)
        reason = failure_reason(shown, exc)
        if known is not None:
            reason += " (its indexed version is kept)"
        log.warning("skipped %s", reason)
        run.failed.append(FailedDocument(rel, reason))
        return None
    run.counts["read"] += 1
    for w in document.warnings:
        run.warnings.append(f"{rel}: {w}")
    reuse = {}
    if known:
        for attempt in db.while_gone(settings, f"{rel}: reading its vectors"):  # a read: run again after a restart
            with attempt, pool.connection() as conn:
                rows = storage.reusable_vectors(conn, run.base_id, known[0], spec.fingerprint)
        reuse = {embedding_text(title, headings, text): vector for title, headings, text, vector in rows}
    m = document.meta
    meta = storage.DocumentMeta(rel, document.title, document.kind, content_hash, size, tags=m.tags,
                                author=m.author, category=m.category, date=m.date,
                                modified_at=modified_at,
                                language=m.language, extra=dict(m.extra))
    return storage.PendingDocument(meta, chunks, [reuse.get(c.embedding_text) for c in chunks],
                                   replaces=known[0] if known else None, terms=tokenize(chunks, spec.field_weight))


def _modified_at(path: Path) -> datetime | None:
    """The file's modification time (what since/until fall back on), None when it cannot be examined."""
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc)
    except (OSError, ValueError, OverflowError):
        return None


def failure_reason(shown: str, exc: Exception) -> str:
    """Return why a file was skipped, starting with its path `shown`: ``"<path>: <reason>"``."""
    if isinstance(exc, UnreadableDocument):
        return display_path(exc.message)
    if isinstance(exc, OSError):
        return f"{shown}: cannot open: {exc.strerror or exc}"
    if isinstance(exc, RecursionError):
        return f"{shown}: nested too deeply to read (RecursionError)"
    if isinstance(exc, MemoryError):
        return f"{shown}: out of memory while reading"
    detail = display_path(str(exc))[:300]
    return f"{shown}: could not be read ({type(exc).__name__}{': ' + detail if detail else ''})"


def own_document(base: storage.BaseRow, document: Document, data: bytes, document_id: int
                 ) -> storage.PendingDocument:
    """Chunk and tokenize a document the base holds itself (a note, a fact) for :func:`storage.write_documents`.

    No vectors: :func:`embed_own` embeds them once the words are written.
    """
    chunks = chunk_document(document, chunk_size=base.base_spec.chunk_size)
    meta = storage.DocumentMeta(document.path, document.title, document.kind, hashlib.sha256(data).hexdigest(),
                                len(data))
    return storage.PendingDocument(meta, chunks, None, document_id=document_id,
                                   terms=tokenize(chunks, base.base_spec.field_weight))
