"""Vectors: the ``embeddings`` of chunks, one per chunk and model fingerprint; a base's switch of model."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from .. import sqlfiles
from ..chunking import embedding_text
from ..errors import InvalidInput
from .locks import lock_base
from .maintenance import flush_statistics

__all__ = [
    "copy_vectors", "halfvec_binary", "text_hash", "vectors_of_texts", "chunks_without_vector", "count_chunks_without_vector", "write_vectors",
    "reusable_vectors", "switch_embedding", "delete_other_vectors", "note_vectors", "note_model_unavailable",
    "NOTE_REASONS", "count_refused",
]

#: Why a chunk is noted in ``vector_notes`` (migration 0018): no vector because the embedding
#: service refused its text, or the model did not answer; or a vector made from a cut text.
NOTE_REASONS = ("refused", "model_unavailable", "cut")

# COPY cannot be EXPLAINed, and every file of sql/ is (tests/test_contracts.py): it stays here.
_COPY_VECTORS = ("COPY embeddings (chunk_id, model, base_id, document_id, embedding, text_hash)"
                 " FROM STDIN (FORMAT BINARY)")


def text_hash(text: str) -> int:
    """Return the ``embeddings.text_hash`` of an embedding text: its BLAKE2b's first 8 bytes as a signed int64.

    A key to find candidates only: a reused vector's text is compared in full (:func:`vectors_of_texts`).
    """
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "big", signed=True)


def copy_vectors(cur: psycopg.Cursor, base_id: int, model: str,
                 rows: Sequence[tuple[int, int, Any, int]]) -> None:
    """COPY vectors ``(chunk_id, document_id, vector, text_hash)`` in binary: halfvec's own format, no text.

    ``text_hash`` is :func:`text_hash` of the chunk's embedding text (what the vector was made from).

    Raises:
        InvalidInput: a vector that is not one-dimensional or holds NaN or infinity.
    """
    if not rows:
        return
    with cur.copy(_COPY_VECTORS) as copy:
        # bytea's binary form is the bytes as they are: the server reads them with halfvec's receive function.
        copy.set_types(["int8", "text", "int4", "int8", "bytea", "int8"])
        for chunk_id, document_id, vector, hashed in rows:
            copy.write_row((chunk_id, model, base_id, document_id, halfvec_binary(vector), hashed))


def vectors_of_texts(conn: psycopg.Connection, base_id: int, model: str, texts: Iterable[str]) -> dict[str, Any]:
    """Return the stored `model` vector of each embedding text of `texts` that some chunk of the base has.

    Candidates are found by :func:`text_hash`; each one's own embedding text is rebuilt from its
    chunk and compared in full, so a hash collision only leaves that text out (it is embedded).
    """
    by_hash = {text_hash(t): t for t in texts}
    if not by_hash:
        return {}
    found = conn.execute(sqlfiles.load("storage/vectors_of_texts"),
                         {"base_id": base_id, "model": model, "hashes": list(by_hash)}).fetchall()
    return {by_hash[h]: vector for h, title, headings, text, vector in found
            if embedding_text(title, headings, text) == by_hash[h]}


def halfvec_binary(vector: Any) -> bytes:
    """Return pgvector's binary halfvec: dimension (int16), unused (int16), big-endian float16 values.

    Raises:
        InvalidInput: a vector that is not one-dimensional or holds NaN or infinity.
    """
    import numpy as np  # here: a search imports this module and needs no numpy (issue 25, start-up)

    values = np.asarray(vector.to_numpy() if hasattr(vector, "to_numpy") else vector, dtype=np.float32)
    if values.ndim != 1 or not np.all(np.isfinite(values)):
        raise InvalidInput("a vector must be one-dimensional with finite values")
    return struct.pack(">HH", values.shape[0], 0) + values.astype(">f2").tobytes()


def chunks_without_vector(conn: psycopg.Connection, base_id: int, model: str, limit: int,
                          document_id: int | None = None, after: int = 0, max_chars: int | None = None
                          ) -> list[tuple]:
    """Return up to `limit` rows ``(chunk_id, document_id, title, headings, text)`` lacking a `model` vector.

    Oldest first, chunk ids above `after` only; `document_id` keeps that document's chunks only.
    A chunk the model refused when its text was cut to `max_chars` (noted ``refused``) is left
    out: sent again, it would be refused again (another model or `max_chars` sends it again).
    """
    return conn.execute(
        sqlfiles.load("storage/chunks_without_vector"),
        {"base_id": base_id, "model": model, "limit": limit, "document_id": document_id, "after": after,
         "max_chars": max_chars},
    ).fetchall()


def note_vectors(conn: psycopg.Connection, base_id: int, model: str, notes: Sequence[tuple[int, str, str]],
                 max_chars: int | None) -> None:
    """Note ``(chunk_id, reason, detail)`` in ``vector_notes`` (reason: one of :data:`NOTE_REASONS`).

    `max_chars`: the characters the texts were cut to (``Settings.embed_max_chars``; None: not cut).
    Chunks deleted meanwhile are skipped; a chunk noted already takes the new reason.
    """
    if notes:
        conn.execute(sqlfiles.load("storage/note_vectors"),
                     {"base_id": base_id, "model": model, "max_chars": max_chars,
                      "chunk_ids": [n[0] for n in notes], "reasons": [n[1] for n in notes],
                      "details": [n[2] for n in notes]})


def count_refused(conn: psycopg.Connection, base_id: int, model: str, max_chars: int | None) -> int:
    """Return how many chunks of the base the model refused at `max_chars` (not sent again)."""
    return conn.execute("SELECT count(*) FROM vector_notes WHERE base_id = %s AND model = %s AND reason = 'refused'"
                        " AND max_chars IS NOT DISTINCT FROM %s::int", (base_id, model, max_chars)).fetchone()[0]


def note_model_unavailable(conn: psycopg.Connection, base_id: int, model: str, detail: str,
                           max_chars: int | None) -> None:
    """Note every chunk of the base still without a `model` vector ``model_unavailable`` (`detail`: why);
    those the service refused stay ``refused``. The next embedding run sends them again."""
    conn.execute(sqlfiles.load("storage/note_model_unavailable"),
                 {"base_id": base_id, "model": model, "detail": detail, "max_chars": max_chars})


def document_paths(conn: psycopg.Connection, document_ids: Sequence[int]) -> dict[int, str]:
    """Return ``{document_id: path}`` of the documents of `document_ids` (those that still exist)."""
    return dict(conn.execute(sqlfiles.load("storage/document_paths"), {"document_ids": list(document_ids)}).fetchall())


def count_chunks_without_vector(conn: psycopg.Connection, base_id: int, model: str) -> int:
    """Return how many chunks of the base have no vector of `model` (SQL function of migration 0007)."""
    return conn.execute("SELECT chunks_without_vector(%s, %s)", (base_id, model)).fetchone()[0]


def write_vectors(conn: psycopg.Connection, base_id: int, model: str,
                  rows: Sequence[tuple[int, int, Any, int]], *, cut: Sequence[int] = (),
                  max_chars: int | None = None) -> None:
    """Store vectors ``(chunk_id, document_id, vector, text_hash)`` of `model` in one transaction.

    Chunks deleted meanwhile are skipped (their rows would violate the foreign key). Their notes
    in ``vector_notes`` go (they have a vector now); the chunk ids of `cut` (their text was cut to
    `max_chars` before embedding) are noted ``cut``.
    """
    with conn.transaction():
        lock_base(conn, base_id)
        ids = [r[0] for r in rows]
        live = {
            r[0] for r in conn.execute("SELECT chunk_id FROM chunks WHERE base_id = %s AND chunk_id = ANY(%s)",
                                       (base_id, ids))
        }
        with conn.cursor() as cur:
            copy_vectors(cur, base_id, model, [r for r in rows if r[0] in live])
        conn.execute("DELETE FROM vector_notes WHERE base_id = %s AND model = %s AND chunk_id = ANY(%s)",
                     (base_id, model, ids))
        note_vectors(conn, base_id, model, [(c, "cut", f"cut to {max_chars} characters") for c in cut if c in live],
                     max_chars)
    flush_statistics(conn)  # the table upkeep at the end of the run counts these rows (storage.maintenance)


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
        conn.execute("DELETE FROM vector_notes WHERE base_id = %s AND model <> %s", (base_id, model))
        deleted = conn.execute(
            "DELETE FROM embeddings WHERE base_id = %s AND model <> %s", (base_id, model)
        ).rowcount
    flush_statistics(conn)  # the table upkeep after the re-embedding counts these rows (storage.maintenance)
    return deleted
