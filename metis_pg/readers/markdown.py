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
  ``---`` or ``...``) is metadata: in no section; read with PyYAML's safe loader
  into ``Document.meta`` (:mod:`metis_pg.readers.metadata`); its ``title:`` is
  the document title; ``title: ""`` means the document has no title. A front
  matter that is not valid YAML (or not a mapping) is a warning naming the file:
  the document is indexed without its metadata (its ``title:`` line still counts).

``Document.text`` is the decoded file; the title is the front-matter title,
else the first heading, else the file name.

Linear in the file's size: headings are parsed with string methods, not
regular expressions that backtrack (a 60 KB heading line of spaces took 40 s).
"""

from __future__ import annotations

import re


from ._common import HeadingPath, LineCounter, check_time_budget, collapse, decode_text, file_title, source_section
from .document import Document
from .metadata import Metadata, from_mapping

__all__ = ["fence_spans", "read"]

# Front matter: its first line must be a YAML key, so a leading thematic break is not taken for it.
_FRONT_MATTER = re.compile(r"---[ \t]*\n((?:[\w-]+[ \t]*:.*?)?)^(?:---|\.\.\.)[ \t]*$\n?", re.S | re.M)
_FRONT_TITLE = re.compile(r"^title:[ \t]*(.*?)[ \t]*$", re.M)
_FENCE_OPEN = re.compile(r"[ \t]*(`{3,}(?=[^`]*$)|~{3,})")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*")
# First lines of a block a setext underline cannot turn into a heading.
_NOT_PARAGRAPH = re.compile(r" {0,3}(?:[-*+][ \t]|\d{1,9}[.)][ \t]|>|\||<)| {4}|\t")
_BLANKS = " \t"


def _lines(text: str, start: int = 0):
    """Yield (start, end, line) for each line of ``text[start:]``; ``end`` excludes the newline.

    Checks the file's time budget every 4,096 lines.
    """
    for n, line in enumerate(text[start:].split("\n")):
        if not n & 4095:
            check_time_budget()
        yield start, start + len(line), line
        start += len(line) + 1


def fence_spans(text: str, start: int = 0) -> list[tuple[int, int]]:
    """Return the fenced code blocks of ``text[start:]`` as ``(start, end)`` character offsets.

    ``start`` is the start of the opening fence line, ``end`` the end of the
    closing fence line (the end of ``text`` for an unclosed fence).
    """
    spans: list[tuple[int, int]] = []
    fence = None  # (opening offset, pattern of its closing line)
    for line_start, line_end, line in _lines(text, start):
        if fence is None:
            m = _FENCE_OPEN.match(line)
            if m:
                mark = m.group(1)
                fence = (line_start, re.compile(rf"[ \t]*{re.escape(mark[0])}{{{len(mark)},}}[ \t]*"))
        elif fence[1].fullmatch(line):
            spans.append((fence[0], line_end))
            fence = None
    if fence is not None:
        spans.append((fence[0], len(text)))
    return spans


def _atx(line: str) -> tuple[int, str] | None:
    """Return (level, raw text) of an ATX heading line, else None; closing ``#`` s are dropped.

    The CommonMark rule ``" {0,3}(#{1,6})(?:[ \\t]+(.*?))?(?:[ \\t]+#+)?[ \\t]*"`` without a
    regular expression, whose backtracking made a long line quadratic.
    """
    i = 0
    while i < 3 and line.startswith(" ", i):
        i += 1
    j = i
    while j < len(line) and line[j] == "#":
        j += 1
    if not 1 <= j - i <= 6 or (j < len(line) and line[j] not in _BLANKS):
        return None
    rest = line[j:].rstrip(_BLANKS)
    closing = rest.rstrip("#")
    if len(closing) < len(rest) and (not closing or closing[-1] in _BLANKS):
        rest = closing.rstrip(_BLANKS)
    return j - i, rest.strip(_BLANKS)


def _heading_text(raw: str) -> str:
    """Return a heading's text, collapsed, without a trailing attribute list (``{ #anchor }``)."""
    body = raw.rstrip(_BLANKS)
    if body.endswith("}"):
        brace = body.rfind("{")
        inner = body[brace + 1 : -1]
        if brace >= 0 and "}" not in inner and inner.lstrip(_BLANKS)[:1] in ("#", ".", ":") and inner.strip(_BLANKS):
            raw = body[:brace]
    return collapse(raw)


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
        atx = _atx(line)
        setext = _SETEXT.fullmatch(line)
        if atx:
            found.append((line_start, line_end, atx[0], _heading_text(atx[1])))
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
    meta = Metadata()
    warnings: list[str] = []
    front = _FRONT_MATTER.match(text)
    if front:
        body_start = front.end()
        meta, warning = _front_matter(front.group(1))
        if warning:
            warnings.append(f"{path}: {warning}")
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
    return Document(path, title, "md", tuple(s for s in sections if s), text, tuple(warnings), meta)


def _front_matter(block: str) -> tuple[Metadata, str | None]:
    """Return the metadata of a front matter's YAML, and a warning (None when it is valid)."""
    if not block.strip():
        return Metadata(), None
    import yaml  # here: a search reads no front matter (metis search's start-up)

    try:
        data = yaml.safe_load(block)  # safe: no Python objects, no tags that run code
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""  # +1: 0-based, +1: the opening ---
        problem = getattr(exc, "problem", None) or type(exc).__name__
        return Metadata(), f"front matter is not valid YAML ({problem}{where}): indexed without its metadata"
    except RecursionError:
        return Metadata(), "front matter nested too deeply: indexed without its metadata"
    if not isinstance(data, dict):
        return Metadata(), "front matter is not a YAML mapping of keys: indexed without its metadata"
    return from_mapping(data), None
