"""Writes: bases, sources, and documents with everything they own.

A document is written in ONE transaction with its chunks, vectors, postings and
the BM25 statistics they change, after deleting its previous version the same
way (SPEC F3): a search never sees half a document, and a process killed in
the middle leaves the last committed state. The indexer writes documents in
batches (:func:`write_documents`, one transaction for several documents), which
keeps this guarantee for each of them. Writers of one base take a
transaction-level advisory lock on it (:func:`lock_base`), so BM25 statistics
rows are updated by one writer at a time; a writer that waits longer than
``Settings.lock_timeout_s`` for it gets :class:`~metis_pg.errors.BaseBusy`.
One indexer (or re-embedder) per base runs at a time (:func:`indexer_session`).

Postings have no foreign key (a check per posting would halve indexing speed):
this module deletes them explicitly wherever a chunk goes.
"""

from __future__ import annotations

import logging
import struct
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from . import db, sqlfiles
from .chunking import Chunk, embedding_text
from .config import Settings
from .errors import BaseBusy, BaseExists, BaseNotFound, ConfigError, DatabaseUnavailable, InvalidInput
from .tokenizer import terms as text_terms

__all__ = [
    "BaseRow",
    "DocumentMeta",
    "create_base",
    "get_base",
    "list_bases",
    "list_bases_light",
    "drop_base",
    "set_status",
    "base_names",
    "ensure_source",
    "source_roots",
    "document_hashes",
    "PendingDocument",
    "write_document",
    "write_documents",
    "delete_document",
    "chunks_without_vector",
    "count_chunks_without_vector",
    "write_vectors",
    "indexer_session",
    "new_document_id",
    "switch_embedding",
    "delete_other_vectors",
    "count_search",
    "record_search",
]

log = logging.getLogger(__name__)

# A transaction-level advisory lock per base: key space 1 is ours.
_LOCK_SPACE = 0x6D65


@dataclass(frozen=True, slots=True)
class BaseRow:
    """A row of ``bases``."""

    base_id: int
    name: str
    kind: str
    spec: dict[str, Any]
    status: str


@dataclass(frozen=True, slots=True)
class DocumentMeta:
    """What ``documents`` holds of a file: path relative to its source, title, kind, hash, size."""

    path: str
    title: str
    kind: str
    content_hash: str
    size_bytes: int


def _advisory(conn: psycopg.Connection, query: str, params: tuple) -> Any:
    """Run an advisory-lock function; a role refused them (migration 0008) is told how to fix it."""
    try:
        return conn.execute(query, params).fetchone()[0]
    except psycopg.errors.InsufficientPrivilege as exc:
        raise ConfigError(
            "this database role may not take advisory locks (migration 0008 revoked them from PUBLIC): "
            "run `GRANT EXECUTE ON FUNCTION pg_advisory_lock(integer, integer), pg_try_advisory_lock(integer, integer),"
            " pg_advisory_xact_lock(integer, integer), pg_try_advisory_xact_lock(integer, integer) TO <role>`"
            " as a superuser (docs/sql-views.md)"
        ) from exc


def lock_base(conn: psycopg.Connection, base_id: int) -> None:
    """Take the base's write lock until the end of the current transaction.

    Waits at most the connection's ``lock_timeout`` (``Settings.lock_timeout_s`` on pooled
    connections) for another writer of the base.

    Raises:
        BaseBusy: another session held the base's write lock for longer than that.
    """
    if _advisory(conn, "SELECT pg_try_advisory_xact_lock(%s, %s)", (_LOCK_SPACE, base_id)):
        return
    row = conn.execute(
        "SELECT name, current_setting('lock_timeout') FROM bases WHERE base_id = %s", (base_id,)
    ).fetchone()
    name, waited = row if row else (str(base_id), "lock_timeout")
    try:
        _advisory(conn, "SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_SPACE, base_id))
    except psycopg.errors.LockNotAvailable as exc:
        raise BaseBusy(
            f"base {name!r} is being written by another session: its write lock was not free within {waited}"
            " (setting lock_timeout_s); try again"
        ) from exc


# A session-level advisory lock per base, held (exclusive) by the one running indexer or
# re-embedder for as long as it runs: a base shows 'indexing' only while a live process holds
# it (the SQL function base_state, migration 0008, reads pg_locks with this key space). A killed
# process's lock goes with its connection, so a crash never leaves a base 'indexing' for ever.
INDEXER_LOCK_SPACE = 0x6D69


@contextmanager
def indexer_session(pool: ConnectionPool, base_id: int, *, wait_s: float | None = None) -> Iterator[None]:
    """Be the one indexer of the base for the block: hold its indexer lock on a connection of its own.

    Not a pooled connection: the block itself needs the pool, and many indexing
    jobs at once must not exhaust it. Closing the connection releases the lock.
    A second indexer of the same base waits up to `wait_s` for the first to finish.

    Args:
        wait_s: seconds to wait for another indexer of the base; None = ``Settings.indexer_wait_s``
            (the pool's settings).

    Raises:
        BaseBusy: another process indexes (or re-embeds) the base, and went on for `wait_s`.
        DatabaseUnavailable: no connection to the pool's database.
    """
    settings = getattr(pool, "settings", None) or Settings.from_env()
    wait = settings.indexer_wait_s if wait_s is None else wait_s
    conn = db.connect(pool.conninfo, settings, autocommit=True, application_name="metis indexer")
    with conn:
        try:
            if wait > 0:
                conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{max(1, round(wait * 1000))}ms",))
                _advisory(conn, "SELECT pg_advisory_lock(%s, %s)", (INDEXER_LOCK_SPACE, base_id))
            elif not _advisory(conn, "SELECT pg_try_advisory_lock(%s, %s)", (INDEXER_LOCK_SPACE, base_id)):
                raise psycopg.errors.LockNotAvailable("busy")
        except psycopg.errors.LockNotAvailable as exc:
            row = conn.execute("SELECT name FROM bases WHERE base_id = %s", (base_id,)).fetchone()
            raise BaseBusy(
                f"base {row[0] if row else base_id!r} is being indexed by another process"
                f" (waited {wait:g} s, setting indexer_wait_s): try again when it has finished"
            ) from exc
        except db.DATABASE_ERRORS as exc:
            raise db.unavailable(exc, settings) from exc
        try:
            yield
        finally:
            # Released here, not by closing: the server ends a closed session a moment later,
            # and a status read in that moment would still see the lock.
            with suppress(psycopg.Error):  # a broken session took its lock with it
                conn.execute("SELECT pg_advisory_unlock(%s, %s)", (INDEXER_LOCK_SPACE, base_id))


def new_document_id(conn: psycopg.Connection) -> int:
    """Return a fresh document id (for a document whose path names its id: notes, facts)."""
    return conn.execute("SELECT nextval('documents_document_id_seq')").fetchone()[0]


def switch_embedding(
    conn: psycopg.Connection, base_id: int, spec: dict[str, Any], model: str, *, force: bool = False
) -> bool:
    """Make `spec` the base's spec if every chunk has a `model` vector (or `force`); return whether it did.

    One transaction under the base's write lock: a chunk written meanwhile without
    a `model` vector (an indexer still on the old spec) makes it return False and
    change nothing, so the caller embeds it and tries again.
    """
    with conn.transaction():
        lock_base(conn, base_id)
        if not force and chunks_without_vector(conn, base_id, model, 1):
            return False
        conn.execute("UPDATE bases SET spec = %s WHERE base_id = %s", (Jsonb(spec), base_id))
    return True


def delete_other_vectors(conn: psycopg.Connection, base_id: int, model: str) -> int:
    """Delete the base's vectors of every model but `model`; return how many."""
    with conn.transaction():
        lock_base(conn, base_id)
        conn.execute("SET LOCAL statement_timeout = 0")  # a bulk delete under the lock: work, not a wait
        return conn.execute(
            "DELETE FROM embeddings WHERE base_id = %s AND model <> %s", (base_id, model)
        ).rowcount


def create_base(conn: psycopg.Connection, name: str, kind: str, spec: dict[str, Any]) -> BaseRow:
    """Insert a base; its BM25 totals start at zero.

    Raises:
        BaseExists: a base has this name.
        InvalidInput: the name is not 1-63 letters, digits, ``_ . -`` (first a letter or digit).
    """
    if not isinstance(name, str) or "\x00" in name:  # PostgreSQL text cannot hold NUL: refuse it before psycopg does
        raise InvalidInput(f"invalid base name {name!r}: use 1-63 letters, digits, '_', '.' or '-'")
    try:
        with conn.transaction():
            row = conn.execute(
                "INSERT INTO bases (name, kind, spec) VALUES (%s, %s, %s) RETURNING base_id",
                (name, kind, Jsonb(spec)),
            ).fetchone()
            conn.execute("INSERT INTO bm25_totals (base_id) VALUES (%s)", (row[0],))
    except psycopg.errors.UniqueViolation as exc:
        raise BaseExists(f"a base named {name!r} already exists") from exc
    except psycopg.errors.CheckViolation as exc:
        raise InvalidInput(
            f"invalid base name {name!r}: use 1-63 letters, digits, '_', '.' or '-', starting with a letter or digit"
        ) from exc
    return BaseRow(row[0], name, kind, spec, "ready")


def get_base(conn: psycopg.Connection, name: str) -> BaseRow:
    """Return the base called `name`.

    Raises:
        BaseNotFound: no base has this name.
    """
    if not isinstance(name, str) or "\x00" in name:  # no base name holds NUL (the CHECK on bases.name)
        raise base_not_found(conn, name)
    row = conn.execute(
        "SELECT base_id, name, kind, spec, status FROM bases WHERE name = %s", (name,)
    ).fetchone()
    if row is None:
        raise base_not_found(conn, name)
    return BaseRow(*row)


#: Base names a BASE_NOT_FOUND message lists at most.
_NAMES_LISTED = 20


def base_names(conn: psycopg.Connection, limit: int | None = None) -> list[str]:
    """Return the names of the bases, sorted (at most `limit`; None: all), without their counts."""
    return [r[0] for r in conn.execute("SELECT name FROM bases ORDER BY name LIMIT %s", (limit,))]


def base_not_found(conn: psycopg.Connection, name: object) -> BaseNotFound:
    """Return the error for a missing base, naming the bases that exist (a typo is then plain to see)."""
    names = base_names(conn, _NAMES_LISTED + 1)
    if not names:
        return BaseNotFound(f"no base named {name!r}: there is no base yet (metis index FOLDER --base NAME makes one)")
    listed = ", ".join(names[:_NAMES_LISTED]) + (", …" if len(names) > _NAMES_LISTED else "")
    return BaseNotFound(f"no base named {name!r} (bases: {listed})")


def list_bases(conn: psycopg.Connection, name: str | None = None) -> list[dict[str, Any]]:
    """Return every base (or the one called `name`) with document and chunk counts."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(sqlfiles.load("bases/list"), {"name": name}).fetchall()
    if not rows:
        return rows
    counts = {r[0]: r[1:] for r in conn.execute(sqlfiles.load("bases/counts"),
                                                 {"base_ids": [r["base_id"] for r in rows]})}
    return [{**r, "documents": counts[r["base_id"]][0], "chunks": counts[r["base_id"]][1]} for r in rows]


def list_bases_light(conn: psycopg.Connection, base_ids: Sequence[int]) -> list[dict[str, Any]]:
    """Return name, status, last_indexed_at, chunks, sources, source_names, chunks_without_vector (if waiting) per base."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(sqlfiles.load("bases/health"), {"base_ids": list(base_ids)}).fetchall()
    chunks = dict(conn.execute(sqlfiles.load("bases/chunk_counts"), {"base_ids": list(base_ids)}).fetchall())
    return [{**r, "chunks": chunks.get(r["base_id"], 0)} for r in rows]


def drop_base(conn: psycopg.Connection, name: str) -> None:
    """Delete a base with its sources, documents, chunks, vectors, postings and statistics.

    Raises:
        BaseNotFound: no base has this name.
    """
    with conn.transaction():
        base = get_base(conn, name)
        lock_base(conn, base.base_id)
        conn.execute("SET LOCAL statement_timeout = 0")  # a bulk delete under the lock: work, not a wait
        conn.execute("DELETE FROM posting_blocks WHERE base_id = %s", (base.base_id,))
        conn.execute("DELETE FROM block_lengths WHERE base_id = %s", (base.base_id,))
        conn.execute("DELETE FROM bases WHERE base_id = %s", (base.base_id,))


def mark_tokenized(conn: psycopg.Connection, base_id: int, source_ids: Sequence[int], version: int) -> bool:
    """Record that a run re-tokenized `source_ids` whole; return whether the base is now `version`'s.

    The base's spec gets ``tokenizer_version`` = `version` once every folder source holding
    documents has been re-read by this version, in this run or earlier ones (``metis index
    --base B`` reads one source per run); the notes and facts source (no folder) does not count.
    """
    row = conn.execute(sqlfiles.load("storage/mark_tokenized"),
                       {"base_id": base_id, "source_ids": list(source_ids), "version": version}).fetchone()
    return bool(row and row[0])


def set_status(conn: psycopg.Connection, base_id: int, status: str, *, indexed: bool = False) -> None:
    """Set a base's status (``ready``, ``indexing``, ``waiting``); `indexed` stamps last_indexed_at."""
    # Two statements, not a CASE around now(): Citus refuses a function that is not IMMUTABLE
    # inside a CASE of a write to a reference table.
    if indexed:
        conn.execute("UPDATE bases SET status = %s, last_indexed_at = now() WHERE base_id = %s", (status, base_id))
    else:
        conn.execute("UPDATE bases SET status = %s WHERE base_id = %s", (status, base_id))


def ensure_source(conn: psycopg.Connection, base_id: int, name: str, root: str | None, *,
                  whole_folder: bool = True) -> int:
    """Return the id of the base's source `name`, creating it with folder `root`.

    `whole_folder` says the folder itself is indexed (not single files of it); once true for a
    source it stays true (``sources.whole_folder``: what ``metis index --base B`` reads again).

    Raises:
        InvalidInput: a source of that name already reads another folder.
    """
    row = conn.execute(
        "SELECT source_id, root, whole_folder FROM sources WHERE base_id = %s AND name = %s", (base_id, name)
    ).fetchone()
    if row is not None:
        if root is not None and row[1] is not None and row[1] != root:
            raise InvalidInput(
                f"source {name!r} of this base reads {row[1]}, not {root}: name the new source with --source"
            )
        if whole_folder and not row[2]:
            conn.execute("UPDATE sources SET whole_folder = true WHERE source_id = %s", (row[0],))
        return row[0]
    return conn.execute(
        "INSERT INTO sources (base_id, name, root, whole_folder) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (base_id, name) DO UPDATE SET root = EXCLUDED.root,"
        " whole_folder = sources.whole_folder OR EXCLUDED.whole_folder RETURNING source_id",
        (base_id, name, root, whole_folder),
    ).fetchone()[0]


def source_roots(conn: psycopg.Connection, base_id: int) -> list[tuple[str, str]]:
    """Return ``(name, folder)`` of each source of the base with a folder (not its notes' source)."""
    return conn.execute("SELECT name, root FROM sources WHERE base_id = %s AND root IS NOT NULL ORDER BY name",
                        (base_id,)).fetchall()


def document_hashes(conn: psycopg.Connection, source_id: int) -> dict[str, tuple[int, str]]:
    """Return ``{path: (document_id, content_hash)}`` of a source's documents."""
    rows = conn.execute(
        "SELECT path, document_id, content_hash FROM documents WHERE source_id = %s", (source_id,)
    ).fetchall()
    return {path: (document_id, content_hash) for path, document_id, content_hash in rows}


def reusable_vectors(conn: psycopg.Connection, base_id: int, document_id: int, model: str) -> dict[str, Any]:
    """Return ``{embedding_text: vector}`` of a document's current chunks for `model`."""
    rows = conn.execute(sqlfiles.load("storage/reusable_vectors"),
                        {"base_id": base_id, "document_id": document_id, "model": model})
    reuse = {}
    for title, headings, text, vector in rows:
        reuse[embedding_text(title, headings, text)] = vector
    return reuse


def _delete_document_rows(conn: psycopg.Connection, base_id: int, document_id: int) -> None:
    totals = conn.execute(
        "SELECT count(*), coalesce(sum(term_count), 0) FROM chunks WHERE base_id = %s AND document_id = %s",
        (base_id, document_id),
    ).fetchone()
    conn.execute(sqlfiles.load("storage/bm25_remove_document"), {"base_id": base_id, "document_id": document_id})
    conn.execute("DELETE FROM documents WHERE base_id = %s AND document_id = %s",  # chunks, vectors cascade
                 (base_id, document_id))
    conn.execute(
        sqlfiles.load("storage/bm25_totals_add"),
        {"base_id": base_id, "chunks": -totals[0], "terms": -int(totals[1])},
    )


def delete_document(conn: psycopg.Connection, base_id: int, document_id: int) -> None:
    """Delete a document with its chunks, vectors, postings and BM25 statistics, in one transaction."""
    with conn.transaction():
        lock_base(conn, base_id)
        conn.execute("SET LOCAL statement_timeout = 0")  # a bulk delete under the lock: work, not a wait
        _delete_document_rows(conn, base_id, document_id)


#: Milliseconds a write transaction's statements may take per chunk written, on top of
#: ``statement_timeout``: measured 5.5 ms per chunk for a 2,000-chunk document at load 6 on
#: 2 cores (the whole transaction, Python included); ten times that covers a 20 MB file.
_MS_PER_CHUNK = 50


def _allow_for(conn: psycopg.Connection, chunks: int) -> None:
    """Raise this transaction's statement_timeout by _MS_PER_CHUNK per chunk (0 stays no limit)."""
    conn.execute(
        "SELECT set_config('statement_timeout', CASE WHEN current_setting('statement_timeout') = '0' THEN '0'"
        " ELSE (round(extract(epoch FROM current_setting('statement_timeout')::interval) * 1000)"
        "       + %s::bigint * %s)::bigint::text END, true)",
        (chunks, _MS_PER_CHUNK),
    )


@dataclass(frozen=True, slots=True)
class PendingDocument:
    """A document ready to be written: its row, its chunks and one vector (or None) per chunk.

    Attributes:
        meta: the document row.
        chunks: its chunks, in order.
        vectors: one vector (numpy (dim,) or pgvector value) or None per chunk; None = no vectors.
        replaces: id of the previous version of this document, deleted in the same transaction.
        document_id: the id to give it (from :func:`new_document_id`); None = the next one.
    """

    meta: DocumentMeta
    chunks: Sequence[Chunk]
    vectors: Sequence[Any | None] | None = None
    replaces: int | None = None
    document_id: int | None = None


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
) -> list[int]:
    """Write documents with their chunks, vectors and postings in ONE transaction; return their ids.

    The previous versions they replace are deleted first, in the same transaction, and
    the base's BM25 statistics get one update for the whole batch: each ``bm25_terms``
    row the batch touches gets one new version, not one per document. `model` is the
    fingerprint the vectors belong to.

    Raises:
        InvalidInput: a vector that is not one-dimensional or holds NaN or infinity.
    """
    if not documents:
        return []
    # BM25 reads what the embedder reads: title and headings count for every chunk below them.
    chunk_terms = [[text_terms(embedding_text(c.title, c.headings, c.text)) for c in d.chunks] for d in documents]
    with conn.transaction():
        lock_base(conn, base_id)
        _allow_for(conn, 2 * sum(len(d.chunks) for d in documents))  # the chunks written and those replaced
        for d in documents:
            if d.replaces is not None:
                _delete_document_rows(conn, base_id, d.replaces)
        document_ids = [
            d.document_id if d.document_id is not None else new_id
            for d, new_id in zip(documents, _next_ids(conn, "documents_document_id_seq", len(documents)))
        ]
        placed = _block_chunk_ids(conn, [len(d.chunks) for d in documents])
        with conn.cursor() as cur:
            with cur.copy(
                "COPY documents (document_id, base_id, source_id, path, title, kind, content_hash, size_bytes)"
                " FROM STDIN"
            ) as copy:
                for d, document_id in zip(documents, document_ids):
                    m = d.meta
                    copy.write_row((document_id, base_id, source_id, m.path, m.title, m.kind,
                                    m.content_hash, m.size_bytes))
            with cur.copy(
                "COPY chunks (chunk_id, base_id, document_id, ordinal, text, title, headings, page, line,"
                " char_start, char_end, term_count, line_end, line_map) FROM STDIN"
            ) as copy:
                for d, document_id, ids, terms_of in zip(documents, document_ids, placed, chunk_terms):
                    for chunk_id, chunk, terms in zip(ids, d.chunks, terms_of):
                        copy.write_row((
                            chunk_id, base_id, document_id, chunk.ordinal, chunk.text, chunk.title,
                            list(chunk.headings), chunk.page, chunk.line, chunk.char_start, chunk.char_end,
                            len(terms), chunk.line_end, list(chunk.line_map) or None,
                        ))
            _write_postings(conn, cur, base_id, [
                (chunk_id, terms)
                for ids, terms_of in zip(placed, chunk_terms) for chunk_id, terms in zip(ids, terms_of)
            ])
            _copy_vectors(cur, base_id, model, [
                (chunk_id, document_id, v)
                for d, document_id, ids in zip(documents, document_ids, placed) if d.vectors is not None
                for chunk_id, v in zip(ids, d.vectors) if v is not None
            ])
    return document_ids


#: Chunk ids per posting block: chunk_id = block_no * BLOCK_CHUNKS + offset (migration 0011).
BLOCK_CHUNKS = 256


def _block_chunk_ids(conn: psycopg.Connection, chunk_counts: Sequence[int]) -> list[list[int]]:
    """Return new chunk ids for documents of ``chunk_counts`` chunks, filling whole blocks of their own.

    The batch draws ``ceil(sum / BLOCK_CHUNKS)`` block numbers from sequence ``chunk_blocks`` and
    numbers its chunks through them in order, so no other batch ever writes into its blocks
    (posting rows are only inserted, never merged) and a document's ids are contiguous within a block.
    """
    total = sum(chunk_counts)
    blocks = _next_ids(conn, "chunk_blocks", -(-total // BLOCK_CHUNKS))
    ids = (block * BLOCK_CHUNKS + offset for block in blocks for offset in range(BLOCK_CHUNKS))
    return [[next(ids) for _ in range(n)] for n in chunk_counts]


def _write_postings(conn: psycopg.Connection, cur: psycopg.Cursor, base_id: int,
                    chunks: Sequence[tuple[int, Sequence[str]]]) -> None:
    """Write the posting blocks, block lengths and BM25 statistics of new chunks ``(chunk_id, terms)``.

    The chunks' ids come from :func:`_block_chunk_ids`: their blocks are new, so every row is an
    INSERT. A term frequency above 32,767 (a smallint) is stored as 32,767: a chunk would need
    ~65,000 characters of one word, ~50 times the chunk size.
    """
    if not chunks:
        return
    # (term, tier, block) -> [first_offset, max_tf, min_length, offsets or None, tfs or None]: most
    # rows hold one posting and never get lists. Plain loops: this runs for every posting written.
    rows: dict[tuple[str, int, int], list] = {}
    document_frequency: Counter[str] = Counter()
    lengths: dict[int, dict[int, int]] = {}
    term_total = 0
    for chunk_id, terms in chunks:
        block, offset = divmod(chunk_id, BLOCK_CHUNKS)
        length = len(terms)
        term_total += length
        lengths.setdefault(block, {})[offset] = length
        counts = Counter(terms)
        document_frequency.update(counts.keys())
        for term, tf in counts.items():
            if tf > 32767:
                tf = 32767
            # The posting's tier: 0 for tf 1, 1 for 2-3, 2 for 4-7, 3 for 8+ (migration 0011: the
            # keyword leg reads the high tiers of common terms and bounds the rest unread).
            key = (term, 0 if tf == 1 else 1 if tf < 4 else 2 if tf < 8 else 3, block)
            row = rows.get(key)
            if row is None:
                rows[key] = [offset, tf, length, None, None]
            else:
                if row[3] is None:
                    row[3], row[4] = [row[0]], [row[1]]
                row[3].append(offset)
                row[4].append(tf)
                if tf > row[1]:
                    row[1] = tf
                if length < row[2]:
                    row[2] = length
    if rows:
        max_tf: dict[str, int] = {}
        min_length: dict[str, int] = {}
        for (term, _tier, _block), row in rows.items():
            if row[1] > max_tf.get(term, 0):
                max_tf[term] = row[1]
            if row[2] < min_length.get(term, 1 << 30):
                min_length[term] = row[2]
        def statistics(terms: list[str]) -> dict[str, Any]:
            return {"base_id": base_id, "terms": "\n".join(terms),
                    "dfs": _int_array([document_frequency[t] for t in terms]),
                    "max_tfs": _int_array([max_tf[t] for t in terms]),
                    "min_lengths": _int_array([min_length[t] for t in terms])}

        terms = list(document_frequency)
        term_ids = dict(conn.execute(sqlfiles.load("storage/bm25_add_terms"), statistics(terms)).fetchall())
        new_terms = [t for t in terms if t not in term_ids]
        if new_terms:
            term_ids.update(conn.execute(sqlfiles.load("storage/bm25_new_terms"), statistics(new_terms)).fetchall())
        # In primary-key order (term, block, tier): each term's new rows land next to each other in
        # the index. COPY in text, formatted here: psycopg formats lists in Python, row by row.
        ordered = sorted((term_ids[term], block, tier_, row) for (term, tier_, block), row in rows.items())
        lines = []
        for term_id, block, tier_, (first, top_tf, shortest, offsets, tfs) in ordered:
            arrays = "\\N\t\\N" if offsets is None else f"{_int_array(offsets)}\t{_int_array(tfs)}"
            lines.append(f"{base_id}\t{term_id}\t{tier_}\t{block}\t{top_tf}\t{shortest}\t{first}\t{arrays}\n")
        with cur.copy("COPY posting_blocks (base_id, term_id, tier, block_no, max_tf, min_length, first_offset,"
                      " offsets, tfs) FROM STDIN") as copy:
            copy.write("".join(lines))
    with cur.copy("COPY block_lengths (base_id, block_no, lengths) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["int4", "int4", "int4[]"])
        for block, by_offset in lengths.items():
            copy.write_row((base_id, block, [by_offset.get(o, 0) for o in range(max(by_offset) + 1)]))
    conn.execute(sqlfiles.load("storage/bm25_totals_add"),
                 {"base_id": base_id, "chunks": len(chunks), "terms": term_total})


def _int_array(values: Sequence[int]) -> str:
    """Return the text literal of an int[] (``'{1,2}'``): one join, where psycopg formats lists in Python."""
    return "{" + ",".join(map(str, values)) + "}"


def _next_ids(conn: psycopg.Connection, sequence: str, n: int) -> list[int]:
    """Return `n` new values of `sequence` (one round trip)."""
    if n == 0:
        return []
    return [r[0] for r in conn.execute("SELECT nextval(%s::regclass) FROM generate_series(1, %s)", (sequence, n))]


def _copy_vectors(cur: psycopg.Cursor, base_id: int, model: str, rows: Sequence[tuple[int, int, Any]]) -> None:
    """COPY vectors ``(chunk_id, document_id, vector)`` in binary: halfvec's own format, no text."""
    if not rows:
        return
    with cur.copy("COPY embeddings (chunk_id, model, base_id, document_id, embedding) FROM STDIN (FORMAT BINARY)") as copy:
        # bytea's binary form is the bytes as they are: the server reads them with halfvec's receive function.
        copy.set_types(["int8", "text", "int4", "int8", "bytea"])
        for chunk_id, document_id, vector in rows:
            copy.write_row((chunk_id, model, base_id, document_id, _halfvec_binary(vector)))


def _halfvec_binary(vector: Any) -> bytes:
    """Return pgvector's binary halfvec: dimension (int16), unused (int16), big-endian float16 values."""
    values = np.asarray(vector.to_numpy() if hasattr(vector, "to_numpy") else vector, dtype=np.float32)
    if values.ndim != 1 or not np.all(np.isfinite(values)):
        raise InvalidInput("a vector must be one-dimensional with finite values")
    return struct.pack(">HH", values.shape[0], 0) + values.astype(">f2").tobytes()


def chunks_without_vector(conn: psycopg.Connection, base_id: int, model: str, limit: int) -> list[tuple]:
    """Return up to `limit` rows ``(chunk_id, document_id, title, headings, text)`` lacking a `model` vector."""
    return conn.execute(
        sqlfiles.load("storage/chunks_without_vector"), {"base_id": base_id, "model": model, "limit": limit}
    ).fetchall()


def count_chunks_without_vector(conn: psycopg.Connection, base_id: int, model: str) -> int:
    """Return how many chunks of the base have no vector of `model` (SQL function of migration 0007)."""
    return conn.execute("SELECT chunks_without_vector(%s, %s)", (base_id, model)).fetchone()[0]


def write_vectors(conn: psycopg.Connection, base_id: int, model: str, rows: Sequence[tuple[int, int, Any]]) -> None:
    """Store vectors ``(chunk_id, document_id, vector)`` of `model` in one transaction.

    Chunks deleted meanwhile are skipped (their rows would violate the foreign key).
    """
    with conn.transaction():
        lock_base(conn, base_id)
        live = {
            r[0] for r in conn.execute("SELECT chunk_id FROM chunks WHERE chunk_id = ANY(%s)", ([r[0] for r in rows],))
        }
        with conn.cursor() as cur:
            _copy_vectors(cur, base_id, model, [r for r in rows if r[0] in live])


#: Causes (SQLSTATE or class) of failed search counts already logged: each is logged once per process.
_count_failures: set[str] = set()


def count_search(conn: psycopg.Connection, base_ids: Sequence[int], mode: str) -> None:
    """Add one search of `mode` for today (UTC) to each base (SPEC F20); the question is never stored.

    Best-effort: a count that cannot be written (a full disk, a read-only server, a
    lost connection, a timeout) never fails the search; each cause is logged once
    at WARNING. A base dropped since the search began is skipped (its counts went with it).
    """
    try:
        with conn.transaction():
            conn.execute(sqlfiles.load("storage/count_search"), {"base_ids": sorted(set(base_ids)), "mode": mode})
    except psycopg.errors.ForeignKeyViolation:
        pass
    except psycopg.Error as exc:
        _count_failed(exc)


def record_search(pool: ConnectionPool, base_ids: Sequence[int], mode: str) -> None:
    """:func:`count_search` on a connection of `pool`; no free connection is a failed count too.

    For the search pipeline: nothing about counting a search can fail it.
    """
    try:
        with pool.connection() as conn:
            count_search(conn, base_ids, mode)
    except (DatabaseUnavailable, psycopg.Error) as exc:
        _count_failed(exc)


def _count_failed(exc: BaseException) -> None:
    key = getattr(exc, "sqlstate", None) or type(exc).__name__
    if key not in _count_failures:
        _count_failures.add(key)
        cause = exc.message if isinstance(exc, DatabaseUnavailable) else db.cause_of(exc)
        log.warning("a search was not counted (searches_per_day): %s; searches still answer", cause)
