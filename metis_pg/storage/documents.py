"""Documents with everything they own: their row, chunks, postings and vectors, written in one transaction.

A document is written in ONE transaction with its chunks, vectors, postings and the BM25
statistics they change, after deleting its previous version the same way (SPEC F3): a search
never sees half a document, and a process killed in the middle leaves the last committed state.
The indexer writes documents in batches (:func:`write_documents`, one transaction for several
documents), which keeps this guarantee for each of them. Every write takes the base's write lock
(:func:`metis_pg.storage.locks.lock_base`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from .. import sqlfiles
from ..chunking import Chunk, chunk_terms
from .locks import lock_base
from .maintenance import flush_statistics
from .postings import BLOCK_CHUNKS, PostingColumns, add_totals, place_batch, write_postings
from .vectors import copy_vectors, text_hash

__all__ = [
    "DocumentMeta", "PendingDocument", "new_document_id", "document_hashes", "write_documents", "write_document",
    "delete_document", "block_chunk_ids",
]

# COPY cannot be EXPLAINed, and every file of sql/ is (tests/test_contracts.py): they stay here.
_COPY_DOCUMENTS = ("COPY documents (document_id, base_id, source_id, path, title, kind, content_hash, size_bytes,"
                   " tags, author, category, date, modified_at, language, meta) FROM STDIN")
_COPY_CHUNKS = ("COPY chunks (chunk_id, base_id, document_id, ordinal, text, title, headings, page, line,"
                " char_start, char_end, term_count, line_end, line_map, page_label, col) FROM STDIN")

#: Milliseconds a write transaction's statements may take per chunk written, on top of
#: ``statement_timeout``: measured 5.5 ms per chunk for a 2,000-chunk document at load 6 on
#: 2 cores (the whole transaction, Python included); ten times that covers a 20 MB file.
_MS_PER_CHUNK = 50


@dataclass(frozen=True, slots=True)
class DocumentMeta:
    """What ``documents`` holds of a file: path relative to its source, title, kind, hash, size (bytes),
    and its metadata (:class:`metis_pg.readers.Metadata`: tags, author, category, date, language,
    the other keys as ``extra``) with the file's modification time."""

    path: str
    title: str
    kind: str
    content_hash: str
    size_bytes: int
    tags: tuple[str, ...] = ()
    author: str | None = None
    category: str | None = None
    date: datetime | None = None
    modified_at: datetime | None = None
    language: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PendingDocument:
    """A document ready to be written: its row, its chunks, their terms and one vector (or None) per chunk.

    Attributes:
        meta: the document row.
        chunks: its chunks, in order.
        vectors: one vector (numpy (dim,) or pgvector value) or None per chunk; None = no vectors.
        replaces: id of the previous version of this document, deleted in the same transaction.
        document_id: the id to give it (from :func:`new_document_id`); None = the next one.
        terms: the BM25 terms of each chunk (the indexing pipeline's tokenize step); None =
            :func:`metis_pg.chunking.chunk_terms` of each chunk, computed here once.
    """

    meta: DocumentMeta
    chunks: Sequence[Chunk]
    vectors: Sequence[Any | None] | None = None
    replaces: int | None = None
    document_id: int | None = None
    terms: Sequence[Sequence[str]] | None = None

    def __post_init__(self) -> None:
        if self.terms is None:
            object.__setattr__(self, "terms", [chunk_terms(c) for c in self.chunks])


def new_document_id(conn: psycopg.Connection) -> int:
    """Return a fresh document id (for a document whose path names its id: notes, facts)."""
    return conn.execute("SELECT nextval('documents_document_id_seq')").fetchone()[0]


def document_hashes(conn: psycopg.Connection, source_id: int) -> dict[str, tuple[int, str]]:
    """Return ``{path: (document_id, content_hash)}`` of a source's documents."""
    rows = conn.execute(
        "SELECT path, document_id, content_hash FROM documents WHERE source_id = %s", (source_id,)
    ).fetchall()
    return {path: (document_id, content_hash) for path, document_id, content_hash in rows}


def _delete_document_rows(conn: psycopg.Connection, base_id: int, document_id: int) -> None:
    totals = conn.execute(
        "SELECT count(*), coalesce(sum(term_count), 0) FROM chunks WHERE base_id = %s AND document_id = %s",
        (base_id, document_id),
    ).fetchone()
    conn.execute(sqlfiles.load("storage/bm25_remove_document"), {"base_id": base_id, "document_id": document_id})
    conn.execute("DELETE FROM documents WHERE base_id = %s AND document_id = %s",  # chunks, vectors cascade
                 (base_id, document_id))
    add_totals(conn, base_id, -totals[0], -int(totals[1]))


def delete_document(conn: psycopg.Connection, base_id: int, document_id: int) -> None:
    """Delete a document with its chunks, vectors, postings and BM25 statistics, in one transaction."""
    with conn.transaction():
        lock_base(conn, base_id)
        conn.execute("SET LOCAL statement_timeout = 0")  # a bulk delete under the lock: work, not a wait
        _delete_document_rows(conn, base_id, document_id)
    flush_statistics(conn)  # the table upkeep at the end of the run counts these rows (storage.maintenance)


def write_document(
    conn: psycopg.Connection,
    *,
    base_id: int,
    source_id: int,
    meta: DocumentMeta,
    chunks: Sequence[Chunk],
    vectors: Sequence[Any | None] | None,
    model: str,
    replaces: int | None = None,
    document_id: int | None = None,
) -> int:
    """Write one document with its chunks, vectors and postings; return its id.

    The arguments are those of :class:`PendingDocument`; see :func:`write_documents`.
    """
    pending = PendingDocument(meta, chunks, vectors, replaces, document_id)
    return write_documents(conn, base_id=base_id, source_id=source_id, documents=[pending], model=model)[0]


def write_documents(
    conn: psycopg.Connection,
    *,
    base_id: int,
    source_id: int,
    documents: Sequence[PendingDocument],
    model: str,
    postings: PostingColumns | None = None,
) -> list[int]:
    """Write documents with their chunks, vectors and postings in ONE transaction; return their ids.

    The previous versions they replace are deleted first, in the same transaction, and
    the base's BM25 statistics get one update for the whole batch: each ``bm25_terms``
    row the batch touches gets one new version, not one per document. `model` is the
    fingerprint the vectors belong to. `postings`: the documents' chunks encoded already
    (:func:`metis_pg.storage.postings.encode_batch` of their terms, in order), else encoded here.

    Raises:
        InvalidInput: a vector that is not one-dimensional or holds NaN or infinity.
    """
    if not documents:
        return []
    with conn.transaction():
        lock_base(conn, base_id)
        conn.execute(sqlfiles.load("storage/allow_for_chunks"),  # the chunks written and those replaced
                     {"chunks": 2 * sum(len(d.chunks) for d in documents), "ms_per_chunk": _MS_PER_CHUNK})
        for d in documents:
            if d.replaces is not None:
                _delete_document_rows(conn, base_id, d.replaces)
        document_ids = [
            d.document_id if d.document_id is not None else new_id
            for d, new_id in zip(documents, _next_ids(conn, "documents_document_id_seq", len(documents)))
        ]
        placed = block_chunk_ids(conn, [len(d.chunks) for d in documents])
        with conn.cursor() as cur:
            with cur.copy(_COPY_DOCUMENTS) as copy:
                for d, document_id in zip(documents, document_ids):
                    m = d.meta
                    copy.write_row((document_id, base_id, source_id, m.path, m.title, m.kind,
                                    m.content_hash, m.size_bytes, list(m.tags), m.author, m.category, m.date,
                                    m.modified_at, m.language, Jsonb(dict(m.extra))))
            with cur.copy(_COPY_CHUNKS) as copy:
                for d, document_id, ids in zip(documents, document_ids, placed):
                    for chunk_id, chunk, terms in zip(ids, d.chunks, d.terms):
                        copy.write_row((
                            chunk_id, base_id, document_id, chunk.ordinal, chunk.text, chunk.title,
                            list(chunk.headings), chunk.page, chunk.line, chunk.char_start, chunk.char_end,
                            len(terms), chunk.line_end, list(chunk.line_map) or None, chunk.page_label, chunk.column,
                        ))
            if postings is not None:  # the k-th chunk's id is in the (k // BLOCK_CHUNKS)-th block drawn
                first_ids = [chunk_id for ids in placed for chunk_id in ids][::BLOCK_CHUNKS]
                postings = place_batch(postings, [chunk_id // BLOCK_CHUNKS for chunk_id in first_ids])
            write_postings(conn, cur, base_id, [
                (chunk_id, terms) for d, ids in zip(documents, placed) for chunk_id, terms in zip(ids, d.terms)
            ], postings)
            copy_vectors(cur, base_id, model, [
                (chunk_id, document_id, v, text_hash(chunk.embedding_text))
                for d, document_id, ids in zip(documents, document_ids, placed) if d.vectors is not None
                for chunk_id, chunk, v in zip(ids, d.chunks, d.vectors) if v is not None
            ])
    flush_statistics(conn)  # the table upkeep at the end of the run counts these rows (storage.maintenance)
    return document_ids


def block_chunk_ids(conn: psycopg.Connection, chunk_counts: Sequence[int]) -> list[list[int]]:
    """Return new chunk ids for documents of ``chunk_counts`` chunks, filling whole blocks of their own.

    The batch draws ``ceil(sum / BLOCK_CHUNKS)`` block numbers from sequence ``chunk_blocks`` and
    numbers its chunks through them in order, so no other batch ever writes into its blocks
    (posting rows are only inserted, never merged) and a document's ids are contiguous within a block.
    """
    total = sum(chunk_counts)
    blocks = _next_ids(conn, "chunk_blocks", -(-total // BLOCK_CHUNKS))
    ids = (block * BLOCK_CHUNKS + offset for block in blocks for offset in range(BLOCK_CHUNKS))
    return [[next(ids) for _ in range(n)] for n in chunk_counts]


def _next_ids(conn: psycopg.Connection, sequence: str, n: int) -> list[int]:
    """Return `n` new values of `sequence` (one round trip)."""
    if n == 0:
        return []
    return [r[0] for r in conn.execute("SELECT nextval(%s::regclass) FROM generate_series(1, %s)", (sequence, n))]
