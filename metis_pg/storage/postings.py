"""Postings: posting blocks, block lengths and the BM25 statistics they change (migration 0011).

:func:`encode_blocks` is the pure half (terms of chunks → rows); :func:`write_postings` the
statements. Postings have no foreign key (a check per posting would halve indexing speed):
:mod:`.documents` and :mod:`.bases` delete them explicitly wherever a chunk goes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any
from dataclasses import dataclass

import psycopg

from .. import sqlfiles

__all__ = ["BLOCK_CHUNKS", "MAX_TF", "PostingRow", "EncodedPostings", "encode_blocks", "write_postings"]

#: Chunk ids per posting block: chunk_id = block_no * BLOCK_CHUNKS + offset (migration 0011).
BLOCK_CHUNKS = 256

#: A term frequency above this (a smallint) is stored as this: a chunk would need ~65,000
#: characters of one word, ~50 times the chunk size.
MAX_TF = 32767

# COPY cannot be EXPLAINed, and every file of sql/ is (tests/test_contracts.py): the COPY
# statements, one line each, stay here.
_COPY_BLOCKS = ("COPY posting_blocks (base_id, term_id, tier, block_no, max_tf, min_length, first_offset,"
                " offsets, tfs) FROM STDIN")
_COPY_LENGTHS = "COPY block_lengths (base_id, block_no, lengths) FROM STDIN (FORMAT BINARY)"


@dataclass(slots=True)
class PostingRow:
    """One row of ``posting_blocks`` before its term has an id.

    Attributes:
        first_offset: offset in the block of its first chunk.
        max_tf: the highest term frequency in the row.
        min_length: the shortest chunk (in terms) in the row.
        offsets, tfs: every posting's offset and frequency, None when the row holds one posting.
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


def encode_blocks(chunks: Sequence[tuple[int, Sequence[str]]]) -> EncodedPostings:
    """Encode new chunks ``(chunk_id, terms)`` as posting-block rows; pure (no database).

    Chunk ids come from whole blocks of their own (:func:`metis_pg.storage.documents.block_chunk_ids`),
    so every row is new: rows are only inserted, never merged.
    """
    # Plain loops and lists: this runs for every posting written; most rows hold one posting
    # and never get lists.
    rows: dict[tuple[str, int, int], PostingRow] = {}
    document_frequency: Counter[str] = Counter()
    by_offset: dict[int, dict[int, int]] = {}
    term_total = 0
    for chunk_id, terms in chunks:
        block, offset = divmod(chunk_id, BLOCK_CHUNKS)
        length = len(terms)
        term_total += length
        by_offset.setdefault(block, {})[offset] = length
        counts = Counter(terms)
        document_frequency.update(counts.keys())
        for term, tf in counts.items():
            if tf > MAX_TF:
                tf = MAX_TF
            key = (term, 0 if tf == 1 else 1 if tf < 4 else 2 if tf < 8 else 3, block)
            row = rows.get(key)
            if row is None:
                rows[key] = PostingRow(offset, tf, length)
            else:
                if row.offsets is None:
                    row.offsets, row.tfs = [row.first_offset], [row.max_tf]
                row.offsets.append(offset)
                row.tfs.append(tf)
                if tf > row.max_tf:
                    row.max_tf = tf
                if length < row.min_length:
                    row.min_length = length
    max_tf: dict[str, int] = {}
    min_length: dict[str, int] = {}
    for (term, _tier, _block), row in rows.items():
        if row.max_tf > max_tf.get(term, 0):
            max_tf[term] = row.max_tf
        if row.min_length < min_length.get(term, 1 << 30):
            min_length[term] = row.min_length
    lengths = {block: [o.get(i, 0) for i in range(max(o) + 1)] for block, o in by_offset.items()}
    return EncodedPostings(rows, document_frequency, max_tf, min_length, lengths, len(chunks), term_total)


def write_postings(conn: psycopg.Connection, cur: psycopg.Cursor, base_id: int,
                   chunks: Sequence[tuple[int, Sequence[str]]]) -> None:
    """Write the posting blocks, block lengths and BM25 statistics of new chunks ``(chunk_id, terms)``."""
    if not chunks:
        return
    encoded = encode_blocks(chunks)
    if encoded.rows:
        def statistics(terms: list[str]) -> dict[str, Any]:
            return {"base_id": base_id, "terms": "\n".join(terms),
                    "dfs": _int_array([encoded.document_frequency[t] for t in terms]),
                    "max_tfs": _int_array([encoded.max_tf[t] for t in terms]),
                    "min_lengths": _int_array([encoded.min_length[t] for t in terms])}

        # The terms the base has (updated), then the others (inserted): two statements, as Citus
        # plans no INSERT ... SELECT with a correlated subquery beside a data-modifying CTE.
        terms = list(encoded.document_frequency)
        term_ids = dict(conn.execute(sqlfiles.load("storage/bm25_add_terms"), statistics(terms)).fetchall())
        new_terms = [t for t in terms if t not in term_ids]
        if new_terms:
            term_ids.update(conn.execute(sqlfiles.load("storage/bm25_new_terms"), statistics(new_terms)).fetchall())
        # In primary-key order (term, block, tier): each term's new rows land next to each other in
        # the index. COPY in text, formatted here: psycopg formats lists in Python, row by row.
        ordered = sorted(((term_ids[term], block, tier, row) for (term, tier, block), row in encoded.rows.items()),
                         key=lambda r: r[:3])
        lines = []
        for term_id, block, tier, row in ordered:
            arrays = "\\N\t\\N" if row.offsets is None else f"{_int_array(row.offsets)}\t{_int_array(row.tfs)}"
            lines.append(f"{base_id}\t{term_id}\t{tier}\t{block}\t{row.max_tf}\t{row.min_length}"
                         f"\t{row.first_offset}\t{arrays}\n")
        with cur.copy(_COPY_BLOCKS) as copy:
            copy.write("".join(lines))
    with cur.copy(_COPY_LENGTHS) as copy:
        copy.set_types(["int4", "int4", "int4[]"])
        for block, block_lengths in encoded.lengths.items():
            copy.write_row((base_id, block, block_lengths))
    add_totals(conn, base_id, encoded.chunks, encoded.terms)


def add_totals(conn: psycopg.Connection, base_id: int, chunks: int, terms: int) -> None:
    """Add `chunks` and `terms` (negative: removed) to the base's BM25 totals."""
    conn.execute(sqlfiles.load("storage/bm25_totals_add"), {"base_id": base_id, "chunks": chunks, "terms": terms})


def _int_array(values: Sequence[int]) -> str:
    """Return the text literal of an int[] (``'{1,2}'``): one join, where psycopg formats lists in Python."""
    return "{" + ",".join(map(str, values)) + "}"
