"""Postings: posting blocks, block lengths and the BM25 statistics they change (migration 0011; rows
without a tier column, and without tfs when every posting has the row's max_tf: migration 0023).

:func:`encode_columns` is the pure half (terms of chunks → rows, as numpy columns;
:func:`encode_blocks` the same rows as a dictionary); :func:`write_postings` the statements, the
posting rows by one binary COPY whose bytes numpy builds. Postings have no foreign key (a check per posting would halve indexing speed):
:mod:`.documents` and :mod:`.bases` delete them explicitly wherever a chunk goes.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import psycopg

from .. import sqlfiles

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

__all__ = ["BLOCK_CHUNKS", "MAX_TF", "PostingRow", "EncodedPostings", "PostingColumns", "encode_blocks",
           "encode_columns", "encode_batch", "place_batch", "write_postings"]

#: Chunk ids per posting block: chunk_id = block_no * BLOCK_CHUNKS + offset (migration 0011).
BLOCK_CHUNKS = 256

#: A term frequency above this (a smallint) is stored as this: a chunk would need ~65,000
#: characters of one word, ~50 times the chunk size.
MAX_TF = 32767

# COPY cannot be EXPLAINed, and every file of sql/ is (tests/test_contracts.py): the COPY
# statements, one line each, stay here.
_COPY_BLOCKS = ("COPY posting_blocks (base_id, term_id, block_no, min_length, max_tf, first_offset, offsets, tfs)"
                " FROM STDIN")
_COPY_BLOCKS_BINARY = _COPY_BLOCKS + " (FORMAT BINARY)"
_COPY_LENGTHS = "COPY block_lengths (base_id, block_no, lengths) FROM STDIN (FORMAT BINARY)"


@dataclass(slots=True)
class PostingRow:
    """One row of ``posting_blocks`` before its term has an id.

    Attributes:
        first_offset: offset in the block of its first chunk.
        max_tf: the highest term frequency in the row.
        min_length: the shortest chunk (in terms) in the row.
        offsets: every posting's offset, None when the row holds one posting.
        tfs: every posting's frequency, None when the row holds one posting or when every posting
            has the frequency max_tf (every row of tier 0: tf 1), as ``posting_blocks`` stores it
            (migration 0023).
    """

    first_offset: int
    max_tf: int
    min_length: int
    offsets: list[int] | None = None
    tfs: list[int] | None = None


@dataclass(frozen=True, slots=True)
class EncodedPostings:
    """The rows new chunks add (:func:`encode_blocks`).

    Attributes:
        rows: ``(term, tier, block_no) → PostingRow``. The tier is 0 for tf 1, 1 for 2-3, 2 for 4-7,
            3 for 8+: the keyword leg reads the high tiers of common terms and bounds the rest unread.
        document_frequency: chunks holding each term.
        max_tf, min_length: per term, over its rows (the keyword leg's bounds, ``bm25_terms``).
        lengths: ``block_no → [terms of the chunk at each offset]`` (0 where no new chunk is).
        chunks: chunks encoded. terms: terms in them, all counted.
    """

    rows: dict[tuple[str, int, int], PostingRow]
    document_frequency: Counter[str]
    max_tf: dict[str, int]
    min_length: dict[str, int]
    lengths: dict[int, list[int]]
    chunks: int
    terms: int


@dataclass(frozen=True, slots=True)
class PostingColumns:
    """The rows new chunks add, as columns (:func:`encode_columns`; numpy arrays, one entry per row
    unless said otherwise).

    Attributes:
        terms: the distinct terms of the chunks; every ``term`` below indexes this list.
        term, tier, block_no, max_tf, min_length, first_offset: each row's term (index into
            ``terms``), tier (0 for tf 1, 1 for 2-3, 2 for 4-7, 3 for 8+), block number, highest tf,
            shortest chunk (in terms) and the offset in the block of its first chunk.
        starts: shape (rows + 1,): row r holds postings ``starts[r]:starts[r + 1]`` of ``offsets``
            and ``tfs`` (one posting per (term, chunk), ordered by offset within a row).
        offsets, tfs: shape (postings,): each posting's offset in its block and term frequency
            (at most :data:`MAX_TF`).
        document_frequency, term_max_tf, term_min_length: shape (len(terms),): chunks holding each
            term, its highest tf and the shortest chunk holding it.
        lengths: ``block_no → [terms of the chunk at each offset]`` (0 where no new chunk is).
        chunks: chunks encoded. total_terms: terms in them, all counted.
    """

    terms: list[str]
    term: np.ndarray
    tier: np.ndarray
    block_no: np.ndarray
    max_tf: np.ndarray
    min_length: np.ndarray
    first_offset: np.ndarray
    starts: np.ndarray
    offsets: np.ndarray
    tfs: np.ndarray
    document_frequency: np.ndarray
    term_max_tf: np.ndarray
    term_min_length: np.ndarray
    lengths: dict[int, list[int]]
    chunks: int
    total_terms: int


def encode_columns(chunks: Sequence[tuple[int, Sequence[str]]]) -> PostingColumns:
    """Encode new chunks ``(chunk_id, terms)`` as posting-block rows in columns; pure (no database).

    Chunk ids come from whole blocks of their own (:func:`metis_pg.storage.documents.block_chunk_ids`),
    so every row is new: rows are only inserted, never merged. One Python step per term (its index
    in a dictionary), the rest in numpy: the (term, chunk) pairs and their counts by one sort of
    ``term * chunks + chunk``, the rows by one sort of (term, block, tier, offset).
    """
    import numpy as np  # here: a search imports this module and needs no numpy (issue 25, start-up)

    n = len(chunks)
    flat: list[str] = []
    extend = flat.extend
    sizes = np.empty(n, np.int64)
    chunk_ids = np.empty(n, np.int64)
    for i, (chunk_id, terms) in enumerate(chunks):
        chunk_ids[i] = chunk_id
        sizes[i] = len(terms)
        extend(terms)
    terms_list = list(dict.fromkeys(flat))  # in order of first occurrence; C loops from here on
    index = dict(zip(terms_list, range(len(terms_list))))
    term_of_flat = np.fromiter(map(index.__getitem__, flat), np.int64, len(flat))
    chunk_of_flat = np.repeat(np.arange(n, dtype=np.int64), sizes)
    pairs, counts = np.unique(term_of_flat * max(n, 1) + chunk_of_flat, return_counts=True)
    pair_term, pair_chunk = np.divmod(pairs, max(n, 1))
    tf = np.minimum(counts, MAX_TF)
    tier = np.where(tf == 1, 0, np.where(tf < 4, 1, np.where(tf < 8, 2, 3)))
    block, offset = np.divmod(chunk_ids[pair_chunk], BLOCK_CHUNKS)
    length = sizes[pair_chunk]
    n_terms = len(terms_list)
    # Per term (pairs are in term order already).
    document_frequency = np.bincount(pair_term, minlength=n_terms)
    term_starts = np.concatenate(([0], np.cumsum(document_frequency)[:-1])) if n_terms else np.empty(0, np.int64)
    term_max_tf = np.maximum.reduceat(tf, term_starts) if n_terms else np.empty(0, np.int64)
    term_min_length = np.minimum.reduceat(length, term_starts) if n_terms else np.empty(0, np.int64)
    # Rows: postings of one (term, block, tier), by offset: one sort of a key packing the four.
    first_block = int(block.min()) if len(block) else 0
    blocks = int(block.max()) - first_block + 1 if len(block) else 1
    order = np.argsort(((pair_term * blocks + (block - first_block)) * 4 + tier) * BLOCK_CHUNKS + offset)
    pair_term, block, tier, offset, tf, length = (a[order] for a in (pair_term, block, tier, offset, tf, length))
    if len(order):
        new_row = np.empty(len(order), bool)
        new_row[0] = True
        new_row[1:] = (pair_term[1:] != pair_term[:-1]) | (block[1:] != block[:-1]) | (tier[1:] != tier[:-1])
        row_starts = np.flatnonzero(new_row)
    else:
        row_starts = np.empty(0, np.int64)
    starts = np.append(row_starts, len(order))
    has_rows = len(row_starts) > 0
    lengths: dict[int, list[int]] = {}
    for chunk_id, size in zip(chunk_ids.tolist(), sizes.tolist()):
        b, o = divmod(chunk_id, BLOCK_CHUNKS)
        row = lengths.setdefault(b, [])
        if len(row) <= o:
            row.extend([0] * (o + 1 - len(row)))
        row[o] = size
    return PostingColumns(
        terms_list, pair_term[row_starts], tier[row_starts], block[row_starts],
        np.maximum.reduceat(tf, row_starts) if has_rows else tf[:0],
        np.minimum.reduceat(length, row_starts) if has_rows else length[:0],
        offset[row_starts], starts, offset, tf, document_frequency, term_max_tf, term_min_length,
        lengths, n, int(sizes.sum()))


def encode_batch(terms: Sequence[Sequence[str]]) -> PostingColumns:
    """:func:`encode_columns` of a batch's chunks before they have ids: the chunk at position k (the
    batch's chunks in order, ``terms[k]`` its terms) as if its id were k, so its block is relative
    (k // BLOCK_CHUNKS, its offset k % BLOCK_CHUNKS). :func:`place_batch` gives the real blocks once
    :func:`metis_pg.storage.documents.block_chunk_ids` has drawn them: the indexer encodes a batch
    while the one before it is written (:class:`metis_pg.indexing.run.Batch`)."""
    return encode_columns(list(enumerate(terms)))


def place_batch(c: PostingColumns, blocks: Sequence[int]) -> PostingColumns:
    """The rows of :func:`encode_batch` moved to the chunk ids of the blocks drawn for the batch:
    relative block r becomes ``blocks[r]`` (as ``block_chunk_ids`` numbers a batch's chunks through
    its blocks in order, the offsets stay)."""
    import numpy as np  # here: a search imports this module and needs no numpy (issue 25, start-up)

    drawn = np.asarray(blocks, np.int64)
    return replace(c, block_no=drawn[c.block_no] if len(c.block_no) else c.block_no,
                   lengths={int(drawn[r]): lengths for r, lengths in c.lengths.items()})


def encode_blocks(chunks: Sequence[tuple[int, Sequence[str]]]) -> EncodedPostings:
    """Encode new chunks ``(chunk_id, terms)`` as posting-block rows keyed by (term, tier, block); pure.

    The same rows as :func:`encode_columns` (which the writes use), as a dictionary of :class:`PostingRow`.
    """
    c = encode_columns(chunks)
    rows: dict[tuple[str, int, int], PostingRow] = {}
    offsets, tfs, starts = c.offsets.tolist(), c.tfs.tolist(), c.starts.tolist()
    for r, (term, tier, block, max_tf, min_length) in enumerate(zip(
            c.term.tolist(), c.tier.tolist(), c.block_no.tolist(), c.max_tf.tolist(), c.min_length.tolist())):
        s, e = starts[r], starts[r + 1]
        row = PostingRow(offsets[s], max_tf, min_length)
        if e - s > 1:
            row.offsets = offsets[s:e]
            if min(tfs[s:e]) < max_tf:
                row.tfs = tfs[s:e]
        rows[(c.terms[term], tier, block)] = row
    return EncodedPostings(
        rows, Counter(dict(zip(c.terms, c.document_frequency.tolist()))),
        dict(zip(c.terms, c.term_max_tf.tolist())), dict(zip(c.terms, c.term_min_length.tolist())),
        c.lengths, c.chunks, c.total_terms)


def write_postings(conn: psycopg.Connection, cur: psycopg.Cursor, base_id: int,
                   chunks: Sequence[tuple[int, Sequence[str]]], encoded: PostingColumns | None = None) -> None:
    """Write the posting blocks, block lengths and BM25 statistics of new chunks ``(chunk_id, terms)``.

    `encoded`: :func:`encode_columns` of `chunks` when the caller has it already (else computed here).
    """
    import numpy as np  # here: a search imports this module and needs no numpy (issue 25, start-up)

    if not chunks:
        return
    if encoded is None:
        encoded = encode_columns(chunks)
    if len(encoded.term):
        def statistics(indexes: list[int]) -> dict[str, Any]:
            return {"base_id": base_id, "terms": "\n".join([encoded.terms[i] for i in indexes]),
                    "dfs": _int_array(encoded.document_frequency[indexes].tolist()),
                    "max_tfs": _int_array(encoded.term_max_tf[indexes].tolist()),
                    "min_lengths": _int_array(encoded.term_min_length[indexes].tolist())}

        # The terms the base has (updated), then the others (inserted): two statements, as Citus
        # plans no INSERT ... SELECT with a correlated subquery beside a data-modifying CTE.
        # The ids of the terms the base has come back by position (ints, binary), the others' by term.
        ids, known = np.zeros(len(encoded.terms), np.int64), np.zeros(len(encoded.terms), bool)
        found = conn.execute(sqlfiles.load("storage/bm25_add_terms"), statistics(list(range(len(encoded.terms)))),
                             binary=True).fetchall()
        if found:
            at, found_ids = np.array(found, np.int64).T
            ids[at - 1], known[at - 1] = found_ids, True
        new_terms = np.flatnonzero(~known).tolist()
        if new_terms:
            new_ids = dict(conn.execute(sqlfiles.load("storage/bm25_new_terms"), statistics(new_terms)).fetchall())
            ids[new_terms] = [new_ids[encoded.terms[i]] for i in new_terms]
        term_id = ids[encoded.term]
        # In descending primary-key order (term, block, max_tf) within each group of rows of the same
        # layout (_rows_binary builds a group at a time), so not one ordered stream. Descending: each
        # term's new keys go at the end of its range of the primary key, and inserted in ascending
        # order they leave its leaf pages a third emptier (measured: 1.63 against 1.45 MB per 1,000
        # chunks in 2,000-chunk batches, 1.12 built at once; docs/performance.md). By binary COPY, the
        # stream built in numpy (psycopg formats rows and lists in Python).
        order = np.lexsort((encoded.max_tf, encoded.block_no, term_id))[::-1]
        with cur.copy(_COPY_BLOCKS_BINARY) as copy:
            copy.write(_rows_binary(base_id, term_id, encoded, order))
    with cur.copy(_COPY_LENGTHS) as copy:
        copy.set_types(["int4", "int4", "int4[]"])
        for block, block_lengths in encoded.lengths.items():
            copy.write_row((base_id, block, block_lengths))
    add_totals(conn, base_id, encoded.chunks, encoded.total_terms)


@functools.cache
def _layouts() -> tuple[np.dtype, np.dtype, np.dtype]:
    """The parts of a ``posting_blocks`` row in COPY's binary format, as numpy dtypes (built on first use):

    - the fixed part (the columns of :data:`_COPY_BLOCKS`): the field count, then each field's
      length and value (big-endian), up to ``first_offset``; the two lists follow, each its length
      (-1: NULL) and, when present, a one-dimensional smallint array;
    - an array's header: dimensions, has-nulls flag, element type (smallint's oid, 21), length of
      its one dimension and its lower bound;
    - one smallint element: its length (2), its value.
    """
    import numpy as np

    row_head = np.dtype([
        ("fields", ">i2"), ("base_len", ">i4"), ("base_id", ">i4"), ("term_len", ">i4"), ("term_id", ">i4"),
        ("block_len", ">i4"), ("block_no", ">i4"), ("min_length_len", ">i4"), ("min_length", ">i4"),
        ("max_tf_len", ">i4"), ("max_tf", ">i2"), ("first_len", ">i4"), ("first_offset", ">i2"),
    ])
    array_head = np.dtype([("ndim", ">i4"), ("nulls", ">i4"), ("oid", ">i4"), ("size", ">i4"), ("lower", ">i4")])
    element = np.dtype([("len", ">i4"), ("value", ">i2")])
    return row_head, array_head, element


_BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags, header extension length
_BINARY_TRAILER = b"\xff\xff"


def _row_dtype(postings: int, with_tfs: bool) -> np.dtype:
    """The binary COPY layout of a ``posting_blocks`` row of `postings` postings: the fixed part
    (:func:`_layouts`), then the two lists: both NULL (length -1) for one posting; else the offsets
    (length, header, elements), then the tfs likewise when `with_tfs`, else NULL (every posting has
    the tf max_tf)."""
    import numpy as np

    row_head, array_head, element = _layouts()
    if postings == 1:
        return np.dtype(row_head.descr + [("offsets_len", ">i4"), ("tfs_len", ">i4")])
    tfs = [("tfs_len", ">i4"), ("tfs_head", array_head), ("tfs", element, (postings,))] if with_tfs else \
        [("tfs_len", ">i4")]
    return np.dtype(row_head.descr + [
        ("offsets_len", ">i4"), ("offsets_head", array_head), ("offsets", element, (postings,)), *tfs])


def _rows_binary(base_id: int, term_id: np.ndarray, c: PostingColumns, order: np.ndarray) -> bytes:
    """Return COPY's binary stream (header, rows, trailer) of the rows of `c`, for
    :data:`_COPY_BLOCKS_BINARY`; `term_id` is each row's term id in the base.

    Rows of the same layout (:func:`_row_dtype`: number of postings, tfs stored or not) are built
    as one record array each, in `order` within it; the groups follow each other. A row's tfs are
    stored only when its postings do not all have the frequency max_tf (migration 0023).
    """
    import numpy as np  # here: a search imports this module and needs no numpy (issue 25, start-up)

    _, array_head, element = _layouts()
    sizes = c.starts[1:] - c.starts[:-1]
    min_tf = np.minimum.reduceat(c.tfs, c.starts[:-1]) if len(sizes) else c.tfs[:0]
    counts = sizes[order]
    with_tfs = (min_tf < c.max_tf)[order] & (counts > 1)
    parts = [_BINARY_HEADER]
    for postings in np.unique(counts).tolist():
        for tfs_kept in ((False, True) if postings > 1 else (False,)):
            rows = order[(counts == postings) & (with_tfs == tfs_kept)]
            if not len(rows):
                continue
            out = np.zeros(len(rows), _row_dtype(postings, tfs_kept))
            out["fields"] = 8
            for name, size in (("base", 4), ("term", 4), ("block", 4), ("min_length", 4), ("max_tf", 2),
                               ("first", 2)):
                out[f"{name}_len"] = size
            out["base_id"] = base_id
            out["term_id"] = term_id[rows]
            for name in ("block_no", "min_length", "max_tf", "first_offset"):
                out[name] = getattr(c, name)[rows]
            out["tfs_len"] = -1
            if postings == 1:
                out["offsets_len"] = -1
            else:
                at = c.starts[rows][:, None] + np.arange(postings)
                for name, column in (("offsets", c.offsets), ("tfs", c.tfs))[:2 if tfs_kept else 1]:
                    out[f"{name}_len"] = array_head.itemsize + element.itemsize * postings
                    head = out[f"{name}_head"]
                    head["ndim"], head["oid"], head["size"], head["lower"] = 1, 21, postings, 1
                    out[name]["len"] = 2
                    out[name]["value"] = column[at]
            parts.append(out.tobytes())
    parts.append(_BINARY_TRAILER)
    return b"".join(parts)


def add_totals(conn: psycopg.Connection, base_id: int, chunks: int, terms: int) -> None:
    """Add `chunks` and `terms` (negative: removed) to the base's BM25 totals."""
    conn.execute(sqlfiles.load("storage/bm25_totals_add"), {"base_id": base_id, "chunks": chunks, "terms": terms})


def _int_array(values: Sequence[int]) -> str:
    """Return the text literal of an int[] (``'{1,2}'``): one join, where psycopg formats lists in Python."""
    return "{" + ",".join(map(str, values)) + "}"
