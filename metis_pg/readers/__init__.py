"""Readers: a file path → :class:`Document` (sections with headings, page, line).

One module per kind (``markdown``, ``text``, ``html``, ``pdf``, ``docx``), each
with a ``read(path, data) -> Document``. :func:`read_document` checks what is
common (known extension, not empty, not over ``max_bytes``), reads the bytes
once and hands them to the reader of the file's kind. Every failure is an
:class:`~metis_pg.errors.UnreadableDocument` whose message starts with the path
(undecodable bytes of a file name shown as ``\\xNN``: :func:`display_path`).

What a reader returns is cleaned (:func:`clean_text`): a NUL or a lone
surrogate (a PDF's ``/Info`` title or text, an HTML character reference) is
replaced by U+FFFD one for one, so offsets hold and PostgreSQL accepts every string.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from ..errors import UnreadableDocument
from ._common import (
    TimeBudgetExceeded,
    check_time_budget,
    budget_left,
    grant_for,
    clean_text,
    display_path,
    time_budget,
    unreadable,
)
from .document import Document, Section
from .files import read_file_once
from .metadata import Metadata
from .text import read_text_file

__all__ = [
    "KINDS", "READER_VERSIONS", "Document", "Metadata", "Section", "TimeBudgetExceeded", "check_time_budget", "clean_document", "grant_for",
    "clean_text", "display_path", "kind_of", "read_document", "read_file_once", "read_text_file", "time_budget", "versioned_hash",
]

#: File extension (lower case) → document kind.
KINDS = {
    ".md": "md",
    ".markdown": "md",
    ".txt": "txt",
    ".text": "txt",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
}
#: Kind → the version of its reader, raised when a reader keeps different text or headings from the
#: same file (2: HTML keeps the main content and closes heading scopes, PDF takes headings from its
#: outline). A document read by an older version is read again by the next ``metis index`` even
#: though its file is unchanged (:func:`versioned_hash`); vectors of unchanged chunk texts are kept.
#: 3 (html, pdf), 2 (md, txt, docx): the document's metadata (tags, author, date, ...) and the
#: file's modification time are stored with it. 4 (pdf): each page's printed label (issue 25).
READER_VERSIONS = {"md": 2, "txt": 2, "html": 3, "pdf": 4, "docx": 2}
#: Kind → the module reading it, imported on first use (pypdf, python-docx and bs4 take a
#: second to import: a search needs none of them).
_READERS = {"md": "markdown", "txt": "text", "html": "html", "pdf": "pdf", "docx": "docx"}


def kind_of(path: str | os.PathLike) -> str | None:
    """Return the kind of a file from its extension (case-insensitive), or None if not read."""
    return KINDS.get(Path(path).suffix.lower())


def versioned_hash(sha256_hex: str, kind: str | None) -> str:
    """Return the content hash stored for a file: its SHA-256 (64 hex digits), followed by
    ``":reader<N>"`` when its kind's reader is at version N > 1 (:data:`READER_VERSIONS`).

    A file is unchanged for ``metis index`` when this string equals the stored one, so a new
    reader version re-reads the files of its kind once.
    """
    version = READER_VERSIONS.get(kind or "", 1)
    return sha256_hex if version == 1 else f"{sha256_hex}:reader{version}"


#: Characters kept of a title and of each heading by default (``METIS_TITLE_MAX_CHARS``).
MAX_TITLE_CHARS = 300


def read_document(path: str | os.PathLike, *, max_bytes: int = 20_000_000, data: bytes | None = None,
                  max_title_chars: int = MAX_TITLE_CHARS) -> Document:
    """Return the file at ``path`` read into a Document.

    Args:
        path: the file; kept as given in ``Document.path``. A symbolic link is followed
            to its target, which is then opened without following links (:func:`read_file_once`).
        max_bytes: larger files are refused (bytes).
        data: the file's bytes, already read (the indexer hashes and parses the same bytes);
            None: read them here, once, within the time budget left (:func:`read_file_once`).
        max_title_chars: characters kept of the title and of each heading (cut at a word, with
            an ellipsis): they prefix every chunk's embedding text, so a PDF's /Info title of
            100 kB would make every chunk's text too long for the model.

    Raises:
        UnreadableDocument: unknown extension, missing or unopenable file, not a regular
            file (a FIFO, a device), empty file, file over ``max_bytes``, a read that did
            not finish within the budget, or a reader's refusal (binary text, truncated /
            encrypted / text-less PDF, broken .docx or zip bomb). The message names the
            file and the reason.
    """
    name = os.fspath(path)
    kind = kind_of(name)
    if kind is None:
        raise unreadable(name, f"unknown kind {Path(name).suffix or '(no extension)'!r} (reads {', '.join(KINDS)})")
    if data is None:
        target = os.path.realpath(name) if os.path.islink(name) else name
        try:
            left = budget_left()  # a read blocked in the kernel is given up with the budget (2 s at least)
            data = read_file_once(target, max_bytes=max_bytes, timeout_s=None if left is None else max(left, 2.0))
        except UnreadableDocument as exc:
            raise UnreadableDocument(exc.message.replace(display_path(target), display_path(name), 1)) from exc
    if not data:
        raise unreadable(name, "empty file")
    if len(data) > max_bytes:
        raise unreadable(name, f"file too large: {len(data)} bytes, over the {max_bytes}-byte limit")
    grant_for(size_bytes=len(data))  # the time budget scales with the file's size (time_budget)
    reader = importlib.import_module(f".{_READERS[kind]}", __name__)
    return clean_document(reader.read(name, data), max_title_chars=max_title_chars)


def _cut(text: str, limit: int | None) -> str:
    """`text` cut to at most `limit` characters, at a word when one ends in its last fifth, with "…"."""
    if limit is None or len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    if space > limit * 4 // 5:
        head = head[:space]
    return head.rstrip() + "…"


def clean_document(doc: Document, *, max_title_chars: int | None = None) -> Document:
    """Return ``doc`` with every NUL and surrogate in its strings replaced by U+FFFD (see :func:`clean_text`).

    ``path`` stays as given; sections stay slices of ``text`` (the replacement is one character for one).
    In the title and headings, which no offset points into, a NUL is dropped instead, and each is
    cut to `max_title_chars` (None: kept whole).
    """

    def label(text: str) -> str:
        return _cut(clean_text(text.replace("\x00", "")), max_title_chars)

    sections = tuple(
        Section(tuple(label(h) for h in s.headings), clean_text(s.text), s.page, s.line, s.char_start,
                s.line_map, s.page_label)
        for s in doc.sections
    )
    return Document(
        doc.path, label(doc.title), doc.kind, sections, clean_text(doc.text),
        tuple(display_path(w) for w in doc.warnings), doc.meta,
    )
