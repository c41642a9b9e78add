"""What every reader returns: a :class:`Document` made of :class:`Section` s.

A section is a run of body text under one heading path, on one page. Its
``text`` is a slice of the document's full text, so
``doc.text[s.char_start:s.char_start + len(s.text)] == s.text`` holds for
every section of every kind, and chunk offsets can be computed from it.

Headings themselves are in ``Document.text`` (between sections) but in no
section's ``text``; a heading with no body gives no section, yet stays in the
``headings`` path of the sections below it. A reader may give several
consecutive sections with the same path and page when it knows a finer
position (HTML: one per block element, each with its source line); the chunker
packs those together, because only whitespace lies between them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..source_lines import line_at  # re-exported: where the readers' sections are described
from .metadata import Metadata

__all__ = ["Section", "Document", "line_at"]


@dataclass(frozen=True, slots=True)
class Section:
    """A run of body text under one heading path.

    Attributes:
        headings: heading path above this text, outermost first, e.g.
            ``("Leave policy", "Vacation")``. The document title is in it only
            when the title is itself a heading of the file.
        text: the body text, stripped, without the heading line.
        page: 1-based PDF page, else None.
        line: 1-based line of the source file where ``text`` starts (md, txt,
            html), else None.
        char_start: offset (characters) of ``text[0]`` in ``Document.text``.
        line_map: where the source line is not ``line`` + the newlines of ``text``
            before an offset (HTML, whose whitespace is collapsed): flattened pairs
            ``(offset in text, line), ...``, offsets increasing; the line at offset
            ``o`` is the line of the last pair at or before ``o`` (``(0, line)``
            when none) + the newlines of ``text`` between. Empty: ``line`` and
            newlines alone give every line (md, txt).
        page_label: the page's printed label when the PDF has page labels (``/PageLabels``: page 19
            may print "16", or "xii"), else None.
    """

    headings: tuple[str, ...]
    text: str
    page: int | None
    line: int | None
    char_start: int
    line_map: tuple[int, ...] = ()
    page_label: str | None = None


@dataclass(frozen=True, slots=True)
class Document:
    """A file read into text and sections.

    Attributes:
        path: the path as given to :func:`metis_pg.readers.read_document`.
        title: front-matter title or first heading (md), ``<title>`` or first
            ``<h1>`` (html), Title or first Heading 1 paragraph (docx), metadata
            title or first line (pdf), first line (txt); else the file name
            without extension.
        kind: ``"md"``, ``"txt"``, ``"html"``, ``"pdf"`` or ``"docx"``.
        sections: the body text in document order.
        text: the full text the ``char_start`` offsets refer to: for md and txt
            the decoded file (newlines normalised to ``"\\n"``), for the other
            kinds the extracted headings and blocks joined by blank lines.
        warnings: what was skipped while reading (e.g. PDF pages without text, a malformed front matter).
        meta: what the file says about itself (front matter, ``<meta>``, PDF info, DOCX core
            properties: :mod:`metis_pg.readers.metadata`); never part of ``text``.
    """

    path: str
    title: str
    kind: str
    sections: tuple[Section, ...]
    text: str
    warnings: tuple[str, ...] = ()
    meta: Metadata = field(default_factory=Metadata)
