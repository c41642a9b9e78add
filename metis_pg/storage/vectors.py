"""Vectors: the ``embeddings`` of chunks, one per chunk and model fingerprint; a base's switch of model."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

from .. import sqlfiles
from ..errors import InvalidInput
from .locks import lock_base

__all__ = [
    "copy_vectors", "halfvec_binary", "chunks_without_vector", "count_chunks_without_vector", "write_vectors",
    "reusable_vectors", "switch_embedding", "delete_other_vectors",
]

# COPY cannot be EXPLAINed, and every file of sql/ is (tests/test_contracts.py): it stays here.
_COPY_VECTORS = "COPY embeddings (chunk_id, model, base_id, document_id, embedding) FROM STDIN (FORMAT BINARY)"


def copy_vectors(cur: psycopg.Cursor, base_id: int, model: str, rows: Sequence[tuple[int, int, Any]]) -> None:
    """COPY vectors ``(chunk_id, document_id, vector)`` in binary: halfvec's own format, no text.

    Raises:
        InvalidInput: a vector that is not one-dimensional or holds NaN or infinity.
    """
    if not rows:
        return
    with cur.copy(_COPY_VECTORS) as copy:
        # bytea's binary form is the bytes as they are: the server reads them with halfvec's receive function.
        copy.set_types(["int8", "text", "int4", "int8", "bytea"])
        for chunk_id, document_id, vector in rows:
            copy.write_row((chunk_id, model, base_id, document_id, halfvec_binary(vector)))


def halfvec_binary(vector: Any) -> bytes:
    """Return pgvector's binary halfvec: dimension (int16), unused (int16), big-endian float16 values.

    Raises:
        InvalidInput: a vector that is not one-dimensional or holds NaN or infinity.
    """
    values = np.asarray(vector.to_numpy() if hasattr(vector, "to_numpy") else vector, dtype=np.float32)
    if values.ndim != 1 or not np.all(np.isfinite(values)):
        raise InvalidInput("a vector must be one-dimensional with finite values")
    return struct.pack(">HH", values.shape[0], 0) + values.astype(">f2").tobytes()


def chunks_without_vector(conn: psycopg.Connection, base_id: int, model: str, limit: int,
                          document_id: int | None = None, after: int = 0) -> list[tuple]:
    """Return up to `limit` rows ``(chunk_id, document_id, title, headings, text)`` lacking a `model` vector.

    Oldest first, chunk ids above `after` only; `document_id` keeps that document's chunks only.
    """
    return conn.execute(
        sqlfiles.load("storage/chunks_without_vector"),
        {"base_id": base_id, "model": model, "limit": limit, "document_id": document_id, "after": after},
    ).fetchall()


def document_paths(conn: psycopg.Connection, document_ids: Sequence[int]) -> dict[int, str]:
    """Return ``{document_id: path}`` of the documents of `document_ids` (those that still exist)."""
    return dict(conn.execute(sqlfiles.load("storage/document_paths"), {"document_ids": list(document_ids)}).fetchall())


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
            r[0] for r in conn.execute("SELECT chunk_id FROM chunks WHERE base_id = %s AND chunk_id = ANY(%s)",
                                       (base_id, [r[0] for r in rows]))
        }
        with conn.cursor() as cur:
            copy_vectors(cur, base_id, model, [r for r in rows if r[0] in live])


def reusable_vectors(conn: psycopg.Connection, base_id: int, document_id: int, model: str
                     ) -> list[tuple[str, list[str], str, Any]]:
    """Return ``(title, headings, text, vector)`` of a document's current chunks that have a `model` vector."""
    return conn.execute(
        sqlfiles.load("storage/reusable_vectors"), {"base_id": base_id, "document_id": document_id, "model": model}
    ).fetchall()


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
