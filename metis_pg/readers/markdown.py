"""Markdown (.md, .markdown): sections between headings, lines exact.

Rules, after CommonMark where it matters for headings:

- ATX headings: 1 to 6 ``#`` after at most 3 spaces, then a space or the end
  of the line (``#5`` is text); closing ``#`` s and a trailing attribute list
  (``{ #anchor }``, MkDocs/Pandoc) are dropped from the heading text.
- Setext headings: a paragraph underlined by ``===`` (level 1) or ``---``
  (level 2). A ``---`` after a blank line is a thematic break (text), and so is
  one under a list item, quote, table row or HTML line.
- Fenced code (```````` ``` ```` or ``~~~``, closed by a fence of the same
  character at least as long; unclosed runs to the end of the file) is body
  text: a ``# comment`` in it is not a heading. :func:`fence_spans` gives the
  fences to the chunker, which keeps each one whole when it fits.
- YAML front matter (``---`` on the first line, then ``key:`` lines, closed by
  ``---`` or ``...``) is metadata: in no section; its ``title:`` is the
  document title; ``title: ""`` means the document has no title.

``Document.text`` is the decoded file; the title is the front-matter title,
else the first heading, else the file name.
"""

from __future__ import annotations

import re

from ._common import HeadingPath, LineCounter, collapse, decode_text, file_title, source_section
from .document import Document

__all__ = ["fence_spans", "read"]

# Front matter: its first line must be a YAML key, so a leading thematic break is not taken for it.
_FRONT_MATTER = re.compile(r"---[ \t]*\n((?:[\w-]+[ \t]*:.*?)?)^(?:---|\.\.\.)[ \t]*$\n?", re.S | re.M)
_FRONT_TITLE = re.compile(r"^title:[ \t]*(.*?)[ \t]*$", re.M)
_FENCE_OPEN = re.compile(r"[ \t]*(`{3,}(?=[^`]*$)|~{3,})")
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*")
# First lines of a block a setext underline cannot turn into a heading.
_NOT_PARAGRAPH = re.compile(r" {0,3}(?:[-*+][ \t]|\d{1,9}[.)][ \t]|>|\||<)| {4}|\t")
_ATTRIBUTES = re.compile(r"[ \t]*\{[ \t]*[#.:][^{}]*\}[ \t]*$")


def _lines(text: str, start: int = 0):
    """Yield (start, end, line) for each line of ``text[start:]``; ``end`` excludes the newline."""
    for line in text[start:].split("\n"):
        yield start, start + len(line), line
        start += len(line) + 1


def fence_spans(text: str, start: int = 0) -> list[tuple[int, int]]:
    """Return the fenced code blocks of ``text[start:]`` as ``(start, end)`` character offsets.

    ``start`` is the start of the opening fence line, ``end`` the end of the
    closing fence line (the end of ``text`` for an unclosed fence).
    """
    spans: list[tuple[int, int]] = []
    fence = None  # (opening offset, fence character, fence length)
    for line_start, line_end, line in _lines(text, start):
        if fence is None:
            m = _FENCE_OPEN.match(line)
            if m:
                fence = (line_start, m.group(1)[0], len(m.group(1)))
        elif re.fullmatch(rf"[ \t]*{re.escape(fence[1])}{{{fence[2]},}}[ \t]*", line):
            spans.append((fence[0], line_end))
            fence = None
    if fence is not None:
        spans.append((fence[0], len(text)))
    return spans


def _heading_text(raw: str) -> str:
    return collapse(_ATTRIBUTES.sub("", raw))


def _headings(text: str, start: int) -> list[tuple[int, int, int, str]]:
    """Return the headings of ``text[start:]`` as (start, end, level, text), outside fences."""
    fences = iter(fence_spans(text, start))
    fence = next(fences, None)
    found: list[tuple[int, int, int, str]] = []
    paragraph: list[tuple[int, str]] = []  # (line start, line) of the open paragraph
    for line_start, line_end, line in _lines(text, start):
        while fence is not None and fence[1] < line_start:
            fence = next(fences, None)
        if fence is not None and fence[0] <= line_start:
            paragraph = []
            continue
        atx = _ATX.fullmatch(line)
        setext = _SETEXT.fullmatch(line)
        if atx:
            found.append((line_start, line_end, len(atx.group(1)), _heading_text(atx.group(2) or "")))
            paragraph = []
        elif setext and paragraph and not _NOT_PARAGRAPH.match(paragraph[0][1]):
            level = 1 if setext.group(1)[0] == "=" else 2
            found.append((paragraph[0][0], line_end, level, _heading_text(" ".join(t for _, t in paragraph))))
            paragraph = []
        elif not line.strip() or (setext and setext.group(1)[0] == "-"):
            paragraph = []  # blank line or thematic break ends the paragraph
        else:
            paragraph.append((line_start, line))
    return found


def read(path: str, data: bytes) -> Document:
    """Return the Document of a Markdown file's bytes: one section per heading with body text.

    Raises:
        UnreadableDocument: binary or undecodable content.
    """
    text = decode_text(data, path)
    title = None
    body_start = 0
    front = _FRONT_MATTER.match(text)
    if front:
        body_start = front.end()
        m = _FRONT_TITLE.search(front.group(1))
        if m:
            # `title: ""` says the document has none: no heading or file name stands in
            # for it (evaluation.load_beir writes untitled passages so).
            title = "" if m.group(1) in ('""', "''") else (m.group(1).strip("'\"").strip() or None)
    headings = _headings(text, body_start)
    above = HeadingPath()
    lines = LineCounter(text)
    sections = []
    cursor = body_start
    for start, end, level, heading in headings:
        sections.append(source_section(text, cursor, start, above.path, lines))
        above.push(level, heading)
        cursor = end
    sections.append(source_section(text, cursor, len(text), above.path, lines))
    if title is None:
        title = next((h for *_, h in headings if h), None) or file_title(path)
    return Document(path, title, "md", tuple(s for s in sections if s), text)
