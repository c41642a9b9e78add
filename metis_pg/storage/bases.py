"""Bases and their sources: create, read (with the spec parsed once), drop, status, tokenizer version."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from .. import sqlfiles
from ..config import BaseSpec
from ..errors import BaseExists, BaseNotFound, InvalidInput
from .locks import lock_base

__all__ = [
    "BaseRow", "create_base", "get_base", "base_names", "base_not_found", "list_bases", "list_bases_light",
    "drop_base", "set_status", "mark_tokenized", "ensure_source", "set_source_readers", "folder_sources",
]


@dataclass(frozen=True, slots=True)
class BaseRow:
    """A row of ``bases``.

    Attributes:
        spec: the stored spec, as JSON (what ``bases.spec`` holds).
        base_spec: the same, parsed once (:meth:`BaseSpec.from_json`), for every reader of the row.
    """

    base_id: int
    name: str
    kind: str
    spec: dict[str, Any]
    status: str
    base_spec: BaseSpec = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_spec", BaseSpec.from_json(self.spec))


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
    """Return every base (or the one called `name`) with document and chunk counts.

    ``vector_notes`` is ``{reason: chunks}`` of the base's model (``sql/bases/vector_notes.sql``):
    why chunks have no vector (``refused``, ``model_unavailable``), and vectors of a cut text (``cut``).
    """
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(sqlfiles.load("bases/list"), {"name": name}).fetchall()
    if not rows:
        return rows
    # Counted apart (bases/counts.sql): on Citus bases/list.sql must run on the coordinator.
    base_ids = [r["base_id"] for r in rows]
    counts = {r[0]: r[1:] for r in conn.execute(sqlfiles.load("bases/counts"), {"base_ids": base_ids})}
    notes: dict[int, dict[str, int]] = {}
    for base_id, reason, n in conn.execute(sqlfiles.load("bases/vector_notes"), {"base_ids": base_ids}):
        notes.setdefault(base_id, {})[reason] = n
    return [{**r, "documents": counts[r["base_id"]][0], "chunks": counts[r["base_id"]][1],
             "vectors_reused": counts[r["base_id"]][2], "vector_notes": notes.get(r["base_id"], {})} for r in rows]


def list_bases_light(conn: psycopg.Connection, base_ids: Sequence[int]) -> list[dict[str, Any]]:
    """Return name, status, last_indexed_at, chunks, sources, source_names, chunks_without_vector (if waiting) per base."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(sqlfiles.load("bases/health"), {"base_ids": list(base_ids)}).fetchall()
    # Counted apart (bases/chunk_counts.sql): on Citus bases/health.sql must run on the coordinator.
    chunks = dict(conn.execute(sqlfiles.load("bases/chunk_counts"), {"base_ids": list(base_ids)}).fetchall())
    return [{**r, "chunks": chunks.get(r["base_id"], 0)} for r in rows]


def drop_base(conn: psycopg.Connection, name: str) -> None:
    """Delete a base with its sources, documents, chunks, vectors, postings and statistics.

    Postings have no foreign key (a check per posting would halve indexing speed): they are
    deleted here explicitly.

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


def mark_tokenized(conn: psycopg.Connection, base_id: int, source_ids: Sequence[int], version: int,
                   field_weight: int) -> bool:
    """Record that a run re-tokenized `source_ids` whole; return whether the base is now `version`'s.

    The base's spec gets ``tokenizer_version`` = `version` once every folder source holding
    documents has been re-read by this version, in this run or earlier ones (``metis index
    --base B`` reads one source per run); the notes and facts source (no folder) does not count.
    ``field_weight`` (the one the run's terms were made with) is recorded with it.
    """
    row = conn.execute(sqlfiles.load("storage/mark_tokenized"),
                       {"base_id": base_id, "source_ids": list(source_ids), "version": version,
                        "field_weight": field_weight}).fetchone()
    if row is None:
        return False
    # Read, then written as a value: Citus refuses the one UPDATE of the reference table with a CASE
    # of sub-selects of documents (docs/scaling.md).
    conn.execute(sqlfiles.load("storage/set_spec"), {"base_id": base_id, "spec": Jsonb(row[1])})
    return bool(row[0])


def set_status(conn: psycopg.Connection, base_id: int, status: str, *, indexed: bool = False) -> None:
    """Set a base's status (``ready``, ``indexing``, ``waiting``); `indexed` stamps last_indexed_at."""
    conn.execute(sqlfiles.load("bases/set_status"), {"base_id": base_id, "status": status})
    if indexed:  # apart, not a CASE around now(): Citus refuses that in a write to a reference table
        conn.execute(sqlfiles.load("bases/set_indexed_at"), {"base_id": base_id})


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
    return conn.execute(sqlfiles.load("bases/add_source"),
                        {"base_id": base_id, "name": name, "root": root, "whole_folder": whole_folder}).fetchone()[0]


def set_source_readers(conn: psycopg.Connection, source_id: int, *, readers: Sequence[str] | None,
                       front_matter_readers: bool | None) -> int:
    """Give a source its readers (checked group names, lower case; ``[]`` = every caller) and whether
    its documents' own ``readers`` metadata may narrow them (None keeps either), and every document
    of the source its readers again, in the caller's transaction; return how many changed
    (sql/access/set_source_readers.sql, :mod:`metis_pg.access`)."""
    return conn.execute(sqlfiles.load("access/set_source_readers"), {
        "source_id": source_id, "readers": None if readers is None else list(readers),
        "front_matter_readers": front_matter_readers}).fetchone()[0]


def folder_sources(conn: psycopg.Connection, base_id: int) -> list[tuple[str, str, bool, int, list[str]]]:
    """Return ``(name, folder, whole_folder, documents, paths)`` of each source of the base with a folder
    (not its notes' source); `paths` are a single-file source's documents (sql/documents/sources.sql)."""
    return conn.execute(sqlfiles.load("documents/sources"), {"base_id": base_id}).fetchall()
