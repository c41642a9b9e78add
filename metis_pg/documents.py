"""A base's documents as they are indexed: list them (``metis ls``), read them back (``metis get``).

A document is read back from its stored chunks, in order (``Document.text[char_start:char_end]``
of each chunk, SPEC F4), so what ``get`` prints is what searches cite, even when the file has
changed or gone since, and a base's notes (which have no file) read the same way. Text between
chunks that no chunk holds (blank lines, the heading lines of Markdown) is not stored: chunks are
joined by a blank line.

Which document, and which part (:func:`parse_target`):

- ``guide/leave.md``: the whole document;
- ``guide/leave.md:12``: the chunk holding line 12 (the last chunk starting at or before it),
  the ``document:line`` a search result cites;
- ``notes.txt:1:2401``: the chunk holding column 2401 of line 1, the ``document:line:column`` a
  search result cites inside a line longer than a chunk (chunks that start inside a line an
  earlier chunk holds have a column, :attr:`metis_pg.chunking.Chunk.column`; every other chunk
  starts at column 1 of its line here, so ``notes.txt:1`` is the line's first chunk);
- ``report.pdf p.3`` or ``report.pdf:p3``: the chunks of page 3 (``document p.N`` as cited, also
  ``document p.N (printed L)``);
- ``guide/*.md``: every document whose path matches the glob (:mod:`fnmatch`; ``*`` crosses ``/``).
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from . import sqlfiles, storage
from .errors import InvalidInput, NotFound

if TYPE_CHECKING:  # pragma: no cover
    from .filters import Filters

__all__ = [
    "Target", "SourceInfo", "DocumentInfo", "DocumentChunk", "DocumentText",
    "parse_target", "list_sources", "list_documents", "get_documents", "get_chunk", "cut_utf8",
]

_LINE = re.compile(r"^(?P<path>.+?):(?P<line>\d+)(?::(?P<column>\d+))?$")
#: A page as cited: ``report.pdf p.3``, ``report.pdf:p3``; a citation of a page with a printed label,
#: ``report.pdf p.19 (printed 16)``, is its page 19 (the label is said, not searched).
_PAGE = re.compile(r"^(?P<path>.+?)(?: p\.|:p)(?P<page>\d+)(?: \(printed [^()]*\))?$")
_GLOB = re.compile(r"[*?\[]")


@dataclass(frozen=True, slots=True)
class Target:
    """What ``metis get`` was asked for: a path or a glob, and optionally a line (with a column) or a
    page (1-based)."""

    path: str
    line: int | None = None
    page: int | None = None
    glob: bool = False
    column: int | None = None


def cut_utf8(text: str, max_bytes: int | None) -> str:
    """Return `text` cut to at most `max_bytes` bytes of UTF-8, on a character boundary (None: whole;
    below 0: nothing)."""
    if max_bytes is None:
        return text
    data = text.encode("utf-8")
    return text if len(data) <= max_bytes else data[:max(max_bytes, 0)].decode("utf-8", errors="ignore")


def parse_target(text: str, known: Sequence[str] = ()) -> Target:
    """Return the target of ``DOCUMENT``, ``DOCUMENT:LINE``, ``DOCUMENT:LINE:COLUMN``, ``DOCUMENT p.N`` /
    ``DOCUMENT:pN`` or a glob.

    A text that is the path of a known document (`known`) is that document, even when it
    ends like ``:12``; ``a:1:2`` is line 1, column 2 of ``a`` (line 2 of ``a:1`` when ``a:1`` is
    known and ``a`` is not).

    Raises:
        InvalidInput: empty text, or a line, column or page of 0.
    """
    text = text.strip() if isinstance(text, str) else ""
    if not text:
        raise InvalidInput("name a document: its path as `metis ls` shows it, or DOCUMENT:LINE as a search cites it")
    if text in known:
        return Target(text)
    m = _PAGE.match(text)
    if m and int(m["page"]) >= 1:
        return Target(m["path"], page=int(m["page"]), glob=bool(_GLOB.search(m["path"])))
    m = _LINE.match(text)
    if m and m["column"] is not None and m["path"] not in known and f"{m['path']}:{m['line']}" in known:
        return Target(f"{m['path']}:{m['line']}", line=_counted("lines", m["column"], text))
    if m:
        column = None if m["column"] is None else _counted("columns", m["column"], text)
        return Target(m["path"], line=_counted("lines", m["line"], text), glob=bool(_GLOB.search(m["path"])),
                      column=column)
    return Target(text, glob=bool(_GLOB.search(text)))


def _counted(what: str, number: str, text: str) -> int:
    """`number` as an int, refused when 0 (lines and columns are counted from 1)."""
    if int(number) < 1:
        raise InvalidInput(f"{what} are counted from 1: {text!r}")
    return int(number)


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """A folder source of a base: its name, its folder, how many documents it holds.

    Attributes:
        whole_folder: the folder itself was indexed (re-indexing reads it whole); False: only
            single files of it were (re-indexing reads those files again, no others).
        paths: a source of single files: its documents' paths, relative to `root` (empty for a
            whole folder).
    """

    name: str
    root: str
    documents: int
    whole_folder: bool = True
    paths: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DocumentInfo:
    """A document of a base, as ``metis ls`` lists it.

    Attributes:
        source: its source's name; document: its path relative to the source's folder.
        size_bytes: the file's size when it was indexed (bytes); chunks: chunks it was cut into.
        indexed_at: when it was last written (ISO 8601, UTC offset included).
        tags, author, category, language: its metadata (issue 21); date: its own date, else its
            file's modification time (ISO 8601), else None.
    """

    source: str
    document: str
    title: str
    kind: str
    chunks: int
    size_bytes: int
    indexed_at: str
    document_id: int
    tags: tuple[str, ...] = ()
    author: str | None = None
    category: str | None = None
    date: str | None = None
    language: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "document": self.document, "title": self.title, "kind": self.kind,
                "chunks": self.chunks, "size_bytes": self.size_bytes, "indexed_at": self.indexed_at,
                "tags": list(self.tags), "author": self.author, "category": self.category, "date": self.date,
                "language": self.language}


@dataclass(frozen=True, slots=True)
class DocumentChunk:
    """One chunk of a document read back: where it starts (line or page), its headings and text.

    ``line_end`` is the line where it ends (None for PDF, docx, and HTML chunks written before
    schema revision 0009); ``column`` the column where it starts when an earlier chunk holds text
    of its first line (:attr:`metis_pg.chunking.Chunk.column`), else None.
    """

    chunk_id: int
    ordinal: int
    line: int | None
    page: int | None
    headings: tuple[str, ...]
    text: str
    line_end: int | None = None
    column: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"chunk_id": self.chunk_id, "ordinal": self.ordinal}
        if self.page is not None:
            data["page"] = self.page
        elif self.line is not None:
            data["line"] = self.line
            if self.column is not None:
                data["column"] = self.column
        data["headings"] = list(self.headings)
        data["text"] = self.text
        return data


@dataclass(frozen=True, slots=True)
class DocumentText:
    """A document (or the part of it asked for) read back from its chunks.

    Attributes:
        whole: True when every chunk is here, False for the chunk at a line or the chunks of a page.
        chunks: in reading order.
    """

    base: str
    info: DocumentInfo
    chunks: tuple[DocumentChunk, ...]
    whole: bool

    @property
    def text(self) -> str:
        """The chunks' text joined by blank lines."""
        return "\n\n".join(c.text for c in self.chunks)

    def location(self) -> str:
        """The citation of what is shown: the document when whole, else ``document:line`` (with
        ``:column`` for a chunk that starts inside a line) or ``document p.N``."""
        first = self.chunks[0] if self.chunks and not self.whole else None
        if first is not None and first.page is not None:
            return f"{self.info.document} p.{first.page}"
        if first is not None and first.line is not None and first.column is not None:
            return f"{self.info.document}:{first.line}:{first.column}"
        if first is not None and first.line is not None:
            return f"{self.info.document}:{first.line}"
        return self.info.document

    def to_dict(self) -> dict[str, Any]:
        return {"base": self.base, **self.info.to_dict(), "citation": self.location(), "whole": self.whole,
                "text": self.text, "chunks": [c.to_dict() for c in self.chunks]}


def list_sources(pool: ConnectionPool, base: storage.BaseRow) -> list[SourceInfo]:
    """Return the folder sources of `base` by name (its notes' source, which has no folder, is not one)."""
    with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(sqlfiles.load("documents/sources"), {"base_id": base.base_id}).fetchall()
    return [SourceInfo(r["name"], r["root"], r["documents"], r["whole_folder"], tuple(r["paths"])) for r in rows]


def _rows(pool: ConnectionPool, base: storage.BaseRow, *, prefix: str | None = None,
          paths: Sequence[str] | None = None, source: str | None = None,
          filters: "Filters | None" = None) -> list[DocumentInfo]:
    params = {"base_id": base.base_id, "prefix": prefix, "paths": None if paths is None else list(paths),
              "source": source, "document_ids": None}
    with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        if filters is not None and not filters.unfiltered:
            kept = cur.execute(sqlfiles.load("search/filtered_documents"),
                               {**filters.to_params(), "base_ids": [base.base_id]}).fetchall()
            params["document_ids"] = [r["document_id"] for r in kept]
        rows = cur.execute(sqlfiles.load("documents/list"), params).fetchall()
    return [DocumentInfo(source=r["source"], document=r["path"], title=r["title"], kind=r["kind"],
                         chunks=r["chunks"], size_bytes=r["size_bytes"], indexed_at=r["indexed_at"].isoformat(),
                         document_id=r["document_id"], tags=tuple(r["tags"] or ()), author=r["author"],
                         category=r["category"], date=r["date"].isoformat() if r["date"] else None,
                         language=r["language"]) for r in rows]


def list_documents(pool: ConnectionPool, base: storage.BaseRow, prefix: str | None = None,
                   source: str | None = None, filters: "Filters | None" = None) -> list[DocumentInfo]:
    """Return the documents of `base` whose path starts with `prefix` (all when None) and that
    `filters` keep (the search filters: tags, author, dates, ...), by path."""
    if prefix is not None and "\x00" in prefix:
        return []
    return _rows(pool, base, prefix=prefix or None, source=source, filters=filters)


def get_documents(pool: ConnectionPool, base: storage.BaseRow, targets: Sequence[str],
                  source: str | None = None) -> list[DocumentText]:
    """Read back the documents (or parts) `targets` name (see :func:`parse_target`), in the order asked.

    A path held by several sources gives one document per source; a glob gives its
    matches by path; a document named twice is read twice.

    Raises:
        InvalidInput: no target, or one that :func:`parse_target` refuses.
        NotFound: a target matches no document (the message names close paths).
    """
    if not targets:
        raise InvalidInput("name at least one document")
    if any("\x00" in t for t in targets if isinstance(t, str)):
        raise InvalidInput("a document path holds no NUL character")
    # Each target as a path, and without its last ``:N`` (``a:1:2`` may be line 2 of ``a:1``).
    asked = [t.strip() for t in targets if isinstance(t, str)]
    exact = _rows(pool, base, paths=asked + [t.rsplit(":", 1)[0] for t in asked if ":" in t], source=source)
    known = {d.document for d in exact}
    parsed = [parse_target(t, tuple(known)) for t in targets]
    needs_all = any(t.glob for t in parsed)
    everything = _rows(pool, base, source=source) if needs_all else []
    by_path: dict[str, list[DocumentInfo]] = {}
    for d in exact:
        by_path.setdefault(d.document, []).append(d)
    missing = [t.path for t in parsed if not t.glob and t.path not in by_path]
    if missing:
        for d in _rows(pool, base, paths=missing, source=source):
            by_path.setdefault(d.document, []).append(d)
    chosen: list[tuple[Target, DocumentInfo]] = []
    for t in parsed:
        found = [d for d in everything if fnmatch.fnmatchcase(d.document, t.path)] if t.glob else by_path.get(t.path, [])
        if not found:
            raise _not_found(pool, base, t, source)
        chosen.extend((t, d) for d in found)
    chunks = _chunks_of(pool, base, {d.document_id for _, d in chosen})
    out = []
    answered: set[int] = set()  # targets (by id) some document answered
    missed: dict[int, list[str]] = {}  # target -> why each of its documents had no such line or page
    for i, (t, d) in enumerate(chosen):
        every = chunks.get(d.document_id, [])
        part = _part(every, t)
        if part is None:
            where = f"page {t.page}" if t.page is not None else f"line {t.line}"
            missed.setdefault(id(t), []).append(f"{d.document} (source {d.source}) has no {where} that was indexed"
                                                f" ({len(every)} chunks{_span(every)})")
            # Two sources may hold the same path: only a target none of them answers is an error.
            if id(t) not in answered and not any(later is t for later, _ in chosen[i + 1:]):
                raise NotFound("; ".join(missed[id(t)]))
            continue
        answered.add(id(t))
        out.append(DocumentText(base=base.name, info=d, chunks=tuple(part), whole=len(part) == len(every)))
    return out


def get_chunk(pool: ConnectionPool, base: storage.BaseRow, chunk_id: int) -> DocumentText:
    """Read back one chunk of `base` by its id (a search result's ``chunk_id``), with its document.

    Raises:
        NotFound: `base` has no chunk with this id.
    """
    with pool.connection() as conn:
        row = conn.execute(sqlfiles.load("documents/chunk"), {"base_id": base.base_id, "chunk_id": chunk_id}).fetchone()
    if row is None:
        raise NotFound(f"base {base.name!r} has no chunk {chunk_id}")
    document_id, path, source = row
    [info] = [d for d in _rows(pool, base, paths=[path], source=source) if d.document_id == document_id]
    every = _chunks_of(pool, base, {document_id}).get(document_id, [])
    part = [c for c in every if c.chunk_id == chunk_id]
    return DocumentText(base=base.name, info=info, chunks=tuple(part), whole=len(part) == len(every))


def _chunks_of(pool: ConnectionPool, base: storage.BaseRow, document_ids: set[int]) -> dict[int, list[DocumentChunk]]:
    """Return ``{document_id: its chunks in reading order}`` (``sql/documents/chunks.sql``)."""
    with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(sqlfiles.load("documents/chunks"),
                           {"base_id": base.base_id, "document_ids": sorted(document_ids)}).fetchall()
    chunks: dict[int, list[DocumentChunk]] = {}
    for r in rows:
        chunks.setdefault(r["document_id"], []).append(DocumentChunk(
            chunk_id=r["chunk_id"], ordinal=r["ordinal"], line=r["line"], page=r["page"],
            headings=tuple(r["headings"]), text=r["text"], line_end=r["line_end"], column=r["col"]))
    return chunks


def _part(chunks: list[DocumentChunk], t: Target) -> list[DocumentChunk] | None:
    """The chunks `t` asks for: all, those of a page, or the one holding a line (and column): the last
    starting at or before it, a chunk without a column starting at column 1 (None: none there)."""
    if t.page is not None:
        return [c for c in chunks if c.page == t.page] or None
    if t.line is not None:
        lined = [c for c in chunks if c.line is not None]
        if not lined:
            return None
        last = lined[-1]
        if last.line_end is not None and t.line > last.line_end:
            return None  # past the document's last indexed line: not its last chunk
        asked = (t.line, t.column or 1)
        before = [c for c in lined if (c.line, c.column or 1) <= asked]
        return [before[-1] if before else lined[0]]
    return chunks


def _span(chunks: list[DocumentChunk]) -> str:
    lines = [c.line for c in chunks if c.line is not None]
    pages = [c.page for c in chunks if c.page is not None]
    if pages:
        return f", pages {min(pages)}-{max(pages)}"
    if lines:
        return f", lines {min(lines)}-{max(lines)}"
    return ", no line numbers (pdf, docx)"


def _not_found(pool: ConnectionPool, base: storage.BaseRow, t: Target, source: str | None) -> NotFound:
    paths = sorted({d.document for d in _rows(pool, base, source=source)})
    what = "matches the glob" if t.glob else "is"
    close = difflib.get_close_matches(t.path, paths, n=3, cutoff=0.5)
    hint = f" (close: {', '.join(close)})" if close else (" (the base has no documents)" if not paths else
                                                           " (`metis ls BASE` lists them)")
    in_source = f" of source {source!r}" if source else ""
    return NotFound(f"no document{in_source} of base {base.name!r} {what} {t.path!r}{hint}")
