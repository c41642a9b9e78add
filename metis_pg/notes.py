"""A base's own documents (SPEC F2, F11): notes, and the facts of memory bases.

Both are Markdown documents of the source ``metis-<base>`` (a source with no
folder) that go through the indexing pipeline like any document (chunk → tokenize →
write words in one transaction → embed vectors: :func:`metis_pg.indexing.own_document`,
:func:`metis_pg.indexing.embed_own`), so they are searched like any document;
``filters={"sources": ["metis-<base>"]}`` keeps them alone.

- A note is ``notes/<id>-<slug>.md``: its title as a ``# heading``, then its text.
- A fact is ``facts/<id>-<slug>.md`` plus a row of ``facts`` (key, observed_at,
  superseded_by, superseded_at). A new fact with the key of a fact that holds,
  or naming one in ``supersedes``, replaces it in the same transaction: the old
  one stays (findable) with ``superseded_by`` / ``superseded_at``. A fact
  observed *before* the one that holds its key is stored as already replaced by it.

Each write ends with :func:`metis_pg.storage.maintain` (ANALYZE and VACUUM of the tables due, as
after an indexing run): ``metis note add`` and ``metis remember`` are CLI commands whose embedded
server never lives long enough for autovacuum.

When the embedding model does not answer, the note or fact is stored without
vectors (found by keywords) and the base is ``waiting``; the next
``metis index`` embeds it (SPEC F14).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from psycopg.rows import dict_row

from . import db, sqlfiles, storage
from .config import BaseSpec, Settings
from .errors import InvalidInput, NotFound
from .indexing import embed_own, own_document
from .models.embed import Embedder
from .readers import markdown
from .readers.document import Document, Section
from .reports import Fact, Note
from .tokenizer import fold

__all__ = [
    "source_name",
    "slug",
    "add_note",
    "list_notes",
    "delete_note",
    "remember",
    "list_facts",
    "MAX_TITLE_CHARS",
]

#: Longest note title (characters).
MAX_TITLE_CHARS = 200
_SLUG_CHARS = 48


def source_name(base: str) -> str:
    """Return the name of the source holding a base's notes and facts: ``metis-<base>``."""
    return f"metis-{base}"


def slug(text: str) -> str:
    """Return `text` as a file-name slug: accents folded, lower case, ``-`` between words, at most 48 characters."""
    words = re.findall(r"[a-z0-9]+", fold(text).lower())
    out = ""
    for word in words:
        candidate = f"{out}-{word}" if out else word
        if len(candidate) > _SLUG_CHARS:
            break
        out = candidate
    return out or (words[0][:_SLUG_CHARS] if words else "untitled")


def _check_size(text: str, spec: BaseSpec, what: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > spec.max_file_bytes:
        raise InvalidInput(f"the {what} is {len(data):,} bytes; the limit is {spec.max_file_bytes:,} bytes")
    return data


def _write(conn, base: storage.BaseRow, source_id: int, pending: storage.PendingDocument) -> None:
    """Write the words of a note or fact (its vectors come after, :func:`embed_own`)."""
    storage.write_documents(conn, base_id=base.base_id, source_id=source_id, documents=[pending],
                            model=base.base_spec.fingerprint)


# -- notes -------------------------------------------------------------------


def add_note(pool: db.Pool, settings: Settings, base: storage.BaseRow, embedder: Embedder | None,
             title: str, text: str) -> int:
    """Store a note in `base` and return its id; it is searchable once this returns.

    Raises:
        InvalidInput: empty or multi-line title, title over 200 characters, empty
            text, or text over the base's ``max_file_bytes``.
    """
    spec = base.base_spec
    title = (title or "").strip()
    if not title:
        raise InvalidInput("a note needs a title")
    if "\n" in title or "\r" in title:
        raise InvalidInput("a note's title is one line")
    if len(title) > MAX_TITLE_CHARS:
        raise InvalidInput(f"the title is {len(title)} characters long; the limit is {MAX_TITLE_CHARS}")
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("the note is empty")
    data = _check_size(f"# {title}\n\n{text.strip()}\n", spec, "note")
    with pool.connection() as conn:
        source_id = storage.ensure_source(conn, base.base_id, source_name(base.name), None)
        document_id = storage.new_document_id(conn)
    pending = own_document(base, markdown.read(f"notes/{document_id}-{slug(title)}.md", data), data, document_id)
    with pool.connection() as conn:
        _write(conn, base, source_id, pending)
    embed_own(pool, settings, base, embedder, document_id)
    storage.maintain(pool)  # the tables due (one query when none is: storage.maintenance)
    return document_id


def list_notes(pool: db.Pool, base: storage.BaseRow) -> list[Note]:
    """Return the notes of `base`, oldest first (facts are not notes: see :func:`list_facts`)."""
    with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            sqlfiles.load("notes/list_notes"), {"base_id": base.base_id, "source": source_name(base.name)}
        ).fetchall()
    return [
        Note(note_id=r["note_id"], base=base.name, title=r["title"], path=r["path"], text=r["text"],
             created_at=r["created_at"].isoformat())
        for r in rows
    ]


def delete_note(pool: db.Pool, base: storage.BaseRow, note_id: int) -> None:
    """Delete a note with its chunks, vectors and terms, in one transaction.

    Raises:
        NotFound: `base` has no note with this id (facts are not deleted here).
    """
    with pool.connection() as conn:
        row = conn.execute(sqlfiles.load("notes/note_or_fact"), {
            "document_id": note_id, "base_id": base.base_id, "source": source_name(base.name)}).fetchone()
        if row is None or row[0]:
            raise NotFound(f"base {base.name!r} has no note {note_id} (`metis note list {base.name}`)")
        storage.delete_document(conn, base.base_id, note_id)
    storage.maintain(pool)


# -- facts -------------------------------------------------------------------


def _aware(observed_at: datetime | str | None) -> datetime:
    if observed_at is None:
        return datetime.now(timezone.utc)
    if isinstance(observed_at, str):
        try:
            observed_at = datetime.fromisoformat(observed_at)
        except ValueError as exc:
            raise InvalidInput(f"observed_at must be an ISO 8601 date or time, not {observed_at!r}") from exc
    if not isinstance(observed_at, datetime):
        raise InvalidInput("observed_at must be a datetime or an ISO 8601 string")
    return observed_at if observed_at.tzinfo else observed_at.replace(tzinfo=timezone.utc)


def remember(
    pool: db.Pool,
    settings: Settings,
    base: storage.BaseRow,
    embedder: Embedder | None,
    text: str,
    *,
    key: str | None = None,
    supersedes: int | None = None,
    observed_at: datetime | str | None = None,
) -> int:
    """Store a fact in the memory base `base` and return its id (SPEC F11).

    Args:
        text: what the fact says.
        key: what it is about; a fact that holds with this key is replaced by this one
            (unless it was observed later: then this one is stored as replaced by it).
        supersedes: the id of a fact this one replaces (its key is inherited when `key` is None).
        observed_at: when the fact was true (datetime or ISO 8601; naive = UTC); default now.
            A replaced fact's ``superseded_at`` is the new fact's ``observed_at``.

    Raises:
        InvalidInput: not a memory base, empty text, `supersedes` not a fact of the base
            or already replaced, bad `observed_at`.
    """
    if base.kind != "memory":
        raise InvalidInput(
            f"base {base.name!r} holds documents, not facts: remember facts in a base of kind memory"
            " (`metis base create NAME --kind memory`)"
        )
    spec = base.base_spec
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("the fact is empty")
    text = text.strip()
    if key is not None and not isinstance(key, str):
        raise InvalidInput("a fact's key is a string")
    key = (key or "").strip() or None
    observed = _aware(observed_at)
    data = _check_size(text, spec, "fact")
    with pool.connection() as conn:
        if supersedes is not None and key is None:
            row = conn.execute(
                "SELECT key FROM facts WHERE document_id = %s AND base_id = %s", (supersedes, base.base_id)
            ).fetchone()
            key = row[0] if row else None
        source_id = storage.ensure_source(conn, base.base_id, source_name(base.name), None)
        document_id = storage.new_document_id(conn)
    path = f"facts/{document_id}-{slug(text)}.md"
    document = Document(path, key or "fact", "md", (Section((), text, None, 1, 0),), text)
    pending = own_document(base, document, data, document_id)

    with pool.connection() as conn, conn.transaction():
        storage.lock_base(conn, base.base_id)  # one writer: at most one fact per key holds
        replaced: list[int] = []
        if supersedes is not None:
            row = conn.execute(
                "SELECT superseded_by FROM facts WHERE document_id = %s AND base_id = %s",
                (supersedes, base.base_id),
            ).fetchone()
            if row is None:
                raise InvalidInput(f"base {base.name!r} has no fact {supersedes}")
            if row[0] is not None:
                raise InvalidInput(f"fact {supersedes} is already replaced by fact {row[0]}")
            replaced.append(supersedes)
        replaced_by: tuple[int, datetime] | None = None
        if key is not None:
            holder = conn.execute(sqlfiles.load("notes/holding_fact"), {"base_id": base.base_id, "key": key}).fetchone()
            if holder is not None and holder[0] != supersedes:
                if supersedes is None and holder[1] > observed:
                    replaced_by = (holder[0], holder[1])  # an older observation: it never held
                else:
                    replaced.append(holder[0])
        _write(conn, base, source_id, pending)
        if replaced:
            conn.execute(sqlfiles.load("notes/supersede_facts"), {
                "base_id": base.base_id, "replaced": replaced, "document_id": document_id, "observed_at": observed})
        conn.execute(sqlfiles.load("notes/add_fact"), {
            "document_id": document_id, "base_id": base.base_id, "key": key, "observed_at": observed,
            "superseded_by": replaced_by[0] if replaced_by else None,
            "superseded_at": replaced_by[1] if replaced_by else None})
    embed_own(pool, settings, base, embedder, document_id)
    storage.maintain(pool)  # the tables due (one query when none is: storage.maintenance)
    return document_id


def list_facts(pool: db.Pool, base: storage.BaseRow, *, holding_only: bool = False) -> list[Fact]:
    """Return the facts of `base` in the order they were observed (replaced ones too unless `holding_only`)."""
    with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            sqlfiles.load("notes/list_facts"), {"base_id": base.base_id, "holding_only": holding_only}
        ).fetchall()
    return [
        Fact(
            fact_id=r["fact_id"], base=base.name, text=r["text"], key=r["key"],
            observed_at=r["observed_at"].isoformat(), holds=r["holds"], superseded_by=r["superseded_by"],
            superseded_at=r["superseded_at"].isoformat() if r["superseded_at"] else None,
        )
        for r in rows
    ]
