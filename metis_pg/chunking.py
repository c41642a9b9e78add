"""Chunking (SPEC F4): a Document's sections → passages of at most ``chunk_size`` characters.

Rules:

- A chunk never crosses a section boundary: a heading or a page. Consecutive
  sections with the same headings and page and only whitespace between them
  in ``Document.text`` (HTML blocks) are one run and are packed together.
- In a run, paragraphs (separated by blank lines) are packed greedily: a
  paragraph joins the current chunk while the chunk stays within
  ``chunk_size`` (the blank lines between count).
- A paragraph longer than ``chunk_size`` is cut, in order of preference, after
  a sentence end (``. ! ?`` and any closing quotes or brackets, followed by
  whitespace; or ``。！？``), at a line break, at whitespace, else hard at
  ``chunk_size``. Each piece takes the latest cut of the most preferred kind
  in the second half of its window (so pieces are not tiny); when the second
  half has none, the whole window is searched in the same order.
- Markdown code fences are never cut: a blank line inside one is not a
  paragraph break, and no cut falls inside one that fits in ``chunk_size``. A
  fence longer than that is cut at line breaks (then whitespace, then hard).
- Chunks are stripped; empty ones are dropped. ``Document.text[char_start:char_end]
  == text`` always holds.
- ``line`` is exact for md and txt: 1 + the number of newlines in
  ``Document.text`` before ``char_start``. HTML: the source line of the block
  where the chunk starts. PDF and docx: None. ``page`` is the PDF page (a
  chunk never crosses a page). ``line_end`` is the line of the chunk's last
  character, and :meth:`Chunk.line_at` the line of any character (HTML: from
  ``line_map``, the source lines of the blocks and of the line breaks the reader
  collapsed): what a citation points at (the line of the snippet's sentence).
- ``column`` (md, txt): a chunk that starts on a line an earlier chunk also
  holds (a line longer than ``chunk_size``) has the 1-based column of its first
  character, and is cited ``document:line:column`` where it points into that
  line; every other chunk has None and is cited ``document:line`` as before.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import InvalidInput
from .readers._common import check_time_budget
from .readers.document import Document, Section, line_at
from .readers.markdown import fence_spans
from .tokenizer import terms as text_terms

__all__ = ["Chunk", "chunk_document", "chunk_terms", "embedding_text"]

_BLANK_LINES = re.compile(r"\n(?:[ \t]*\n)+")
_SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*(?=\s)|[。！？][”’」』）]*")
_LINE_BREAK = re.compile(r"\n")
_WHITESPACE = re.compile(r"\s")

Span = tuple[int, int]


class _Fences:
    """The fenced code blocks of a document, sorted and disjoint, found by binary search."""

    def __init__(self, spans: list[Span]) -> None:
        self._spans = spans
        self._starts = [a for a, _ in spans]

    def around(self, offset: int) -> Span | None:
        """Return the fence (a, b) with a < offset < b, or None."""
        i = bisect_left(self._starts, offset) - 1
        if i >= 0 and offset < self._spans[i][1]:
            return self._spans[i]
        return None


@dataclass(frozen=True, slots=True)
class Chunk:
    """A passage of a document, the unit that is embedded, indexed and returned.

    Attributes:
        ordinal: 0-based position in the document.
        text: the passage, stripped, at most ``chunk_size`` characters.
        title: the document's title.
        headings: heading path above the passage, outermost first.
        page: 1-based PDF page, else None.
        line: 1-based line of the source file where ``text`` starts (md, txt;
            html: the line of the block it starts in), else None.
        char_start: offset (characters) of ``text`` in ``Document.text``.
        char_end: end offset, exclusive: ``Document.text[char_start:char_end] == text``.
        line_end: 1-based source line of the passage's last character (same kinds as ``line``), else None.
        line_map: flattened ``(offset in text, line)`` pairs where the source line of a character is
            not ``line`` + the newlines of ``text`` before it (HTML blocks): see :func:`Chunk.line_at`.
        page_label: the printed label of ``page`` when the PDF has page labels, else None.
        column: 1-based column (characters) of ``text``'s first character in its line, when an
            earlier chunk of the document holds text of that line (a line longer than a chunk, cut
            between chunks; md and txt, whose lines are exact), else None: ``document:line:column``
            tells such chunks apart (a file of one 90 KB line is 76 chunks on line 1).
    """

    ordinal: int
    text: str
    title: str
    headings: tuple[str, ...]
    page: int | None
    line: int | None
    char_start: int
    char_end: int
    line_end: int | None = None
    line_map: tuple[int, ...] = ()
    page_label: str | None = None
    column: int | None = None

    def line_at(self, offset: int) -> int | None:
        """Return the 1-based source line of ``text[offset]`` (offset in characters, clamped), or None."""
        return line_at(self.text, self.line, self.line_map, offset)

    @property
    def embedding_text(self) -> str:
        """Return what the embedder and reranker read: see :func:`embedding_text`."""
        return embedding_text(self.title, self.headings, self.text)


def embedding_text(title: str, headings: Sequence[str], text: str) -> str:
    """Return what the embedder and reranker read (SPEC F4): ``"Title > H1 > H2\\n\\ntext"``.

    A first heading equal to the title (a Markdown ``# Title``, a docx Title
    paragraph) is not repeated: ``Handbook > Leave``, not ``Handbook > Handbook > Leave``.
    A document without title or headings gives its text alone.
    """
    headings = tuple(headings)
    if headings[:1] == (title,):
        headings = headings[1:]
    path = " > ".join(part for part in (title, *headings) if part)
    return f"{path}\n\n{text}" if path else text


def chunk_terms(chunk: Chunk, field_weight: int = 1) -> list[str]:
    """Return a chunk's BM25 terms (:func:`metis_pg.tokenizer.terms`, in text order, repeated).

    Two fields: the heading path (title and headings, as :func:`embedding_text` writes them: they
    count for every chunk below them) and the text. A BM25F-style weighted term frequency
    (Robertson, Zaragoza & Taylor, "Simple BM25 extension to multiple weighted fields", CIKM 2004):
    a word of the path counts ``field_weight`` times in the chunk's term frequency and length, a
    word of the text once, and BM25's saturation and length normalization then apply to the sums
    (the paper's field weight is exactly that repetition).

    Args:
        chunk: the chunk.
        field_weight: how many times a path word counts, 0 to 10 (``BaseSpec.field_weight``).
            1 gives the terms of :func:`embedding_text` (the path once), as before fields.

    Returns:
        The terms of the whole embedding text, then the path's terms ``field_weight - 1`` more
        times (weight 0: the text's terms alone).
    """
    if field_weight == 0:
        return text_terms(chunk.text)
    whole = text_terms(embedding_text(chunk.title, chunk.headings, chunk.text))
    if field_weight == 1:
        return whole
    return whole + text_terms(embedding_text(chunk.title, chunk.headings, "")) * (field_weight - 1)


#: Kinds whose ``line`` is 1 + the newlines of ``Document.text`` before a chunk: their columns are exact too.
EXACT_LINES = frozenset({"md", "txt"})


def chunk_document(doc: Document, *, chunk_size: int = 1200) -> list[Chunk]:
    """Return the chunks of ``doc``, in document order (rules in the module docstring).

    Args:
        doc: a document from :func:`metis_pg.readers.read_document`.
        chunk_size: most characters in a chunk's ``text``.

    Raises:
        InvalidInput: ``chunk_size`` is below 1.
    """
    if chunk_size < 1:
        raise InvalidInput(f"chunk_size must be at least 1 character, not {chunk_size}")
    fences = _Fences(fence_spans(doc.text, doc.sections[0].char_start) if doc.kind == "md" and doc.sections else [])
    chunks: list[Chunk] = []
    for run in _runs(doc):
        check_time_budget()
        start, end = run[0].char_start, run[-1].char_start + len(run[-1].text)
        spans = _pack(doc.text, start, end, chunk_size, fences)
        for (s, e), (line, line_map) in zip(spans, _span_lines(doc.text, run, spans)):
            text = doc.text[s:e]
            line_end = line_at(text, line, line_map, len(text) - 1)
            column = None
            if doc.kind in EXACT_LINES and line is not None and chunks and chunks[-1].line_end == line:
                column = s - doc.text.rfind("\n", 0, s)  # the line starts after its newline (or at 0)
            chunks.append(Chunk(len(chunks), text, doc.title, run[0].headings, run[0].page, line, s, e,
                                line_end, line_map, run[0].page_label, column))
    return chunks


def _runs(doc: Document) -> list[list[Section]]:
    """Group consecutive sections with one heading path and page and only whitespace between."""
    runs: list[list[Section]] = []
    for section in doc.sections:
        last = runs[-1][-1] if runs else None
        if (
            last is not None
            and (last.headings, last.page) == (section.headings, section.page)
            and not doc.text[last.char_start + len(last.text) : section.char_start].strip()
        ):
            runs[-1].append(section)
        else:
            runs.append([section])
    return runs


def _span_lines(text: str, run: list[Section], spans: list[Span]) -> list[tuple[int | None, tuple[int, ...]]]:
    """Return, for each span of a run, the source line where it starts and its line map (see :class:`Chunk`).

    Spans come in order: in sections without a line map, newlines are counted from the
    previous position asked, not from the section's start (linear in the run's size).
    """
    starts = [section.char_start for section in run]
    maps: dict[int, list[int]] = {}
    last: list = [None]  # (section index, offset, line) of the previous position in a map-less section

    def line_of(i: int, pos: int) -> int | None:
        section = run[i]
        if section.line is None:
            return None
        if section.line_map:
            offsets = maps.get(i)
            if offsets is None:
                offsets = maps[i] = list(section.line_map[0::2])
            k = bisect_right(offsets, pos - section.char_start) - 1
            anchor, line = (0, section.line) if k < 0 else (offsets[k], section.line_map[2 * k + 1])
            return line + text.count("\n", section.char_start + anchor, pos)
        previous = last[0]
        offset, line = (previous[1], previous[2]) if previous and previous[0] == i and previous[1] <= pos else (
            section.char_start, section.line)
        line += text.count("\n", offset, pos)
        last[0] = (i, pos, line)
        return line

    out: list[tuple[int | None, tuple[int, ...]]] = []
    for s, e in spans:
        first, final = bisect_right(starts, s) - 1, bisect_right(starts, e - 1) - 1
        line = line_of(first, s)
        if line is None:
            out.append((None, ()))
            continue
        anchors: list[tuple[int, int]] = []  # (offset in the chunk, line), every section start and map entry
        for i in range(first, final + 1):
            section = run[i]
            pos = max(s, section.char_start)
            if i > first:
                at = line_of(i, pos)
                if at is not None:
                    anchors.append((pos - s, at))
            if section.line_map:
                offsets = maps.get(i)
                if offsets is None:
                    offsets = maps[i] = list(section.line_map[0::2])
                lo = bisect_right(offsets, pos - section.char_start)
                hi = bisect_left(offsets, e - section.char_start)
                anchors.extend((section.char_start + offsets[k] - s, section.line_map[2 * k + 1])
                               for k in range(lo, hi))
        line_map: list[int] = []
        kept_offset, kept_line = 0, line
        for offset, at in anchors:  # keep only what counting newlines would not give
            if kept_line + text.count("\n", s + kept_offset, s + offset) != at:
                line_map += (offset, at)
                kept_offset, kept_line = offset, at
        out.append((line, tuple(line_map)))
    return out


def _strip(text: str, start: int, end: int) -> Span:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _paragraphs(text: str, start: int, end: int, fences: _Fences) -> list[Span]:
    """Return the non-blank paragraphs of ``text[start:end]``; blank lines inside fences do not count."""
    spans, pos = [], start
    for m in _BLANK_LINES.finditer(text, start, end):
        if fences.around(m.start()) is None:
            spans.append(_strip(text, pos, m.start()))
            pos = m.end()
    spans.append(_strip(text, pos, end))
    return [(s, e) for s, e in spans if s < e]


def _pack(text: str, start: int, end: int, size: int, fences: _Fences) -> list[Span]:
    """Return the chunk spans of one run: paragraphs packed greedily, long ones split."""
    out: list[Span] = []
    current: Span | None = None
    for n, (s, e) in enumerate(_paragraphs(text, start, end, fences)):
        if not n & 1023:
            check_time_budget()
        if current is not None and e - current[0] <= size:
            current = (current[0], e)
            continue
        if current is not None:
            out.append(current)
        pieces = _split(text, s, e, size, fences)
        out.extend(pieces[:-1])
        current = pieces[-1]
    if current is not None:
        out.append(current)
    return out


def _split(text: str, start: int, end: int, size: int, fences: _Fences) -> list[Span]:
    """Return ``text[start:end]`` cut into stripped spans of at most ``size`` characters."""
    pieces = []
    pos = start
    while end - pos > size:
        check_time_budget()
        cut = _cut_point(text, pos, pos + size, size, fences)
        pieces.append(_strip(text, pos, cut))
        pos = _strip(text, cut, end)[0]
    pieces.append((pos, end))
    return pieces


def _cut_point(text: str, pos: int, limit: int, size: int, fences: _Fences) -> int:
    """Return where to end the piece that starts at ``pos``: an offset in (pos, limit].

    A cut at offset c ends the piece before ``text[c]``. No cut falls strictly
    inside a fence of at most ``size`` characters; inside a longer fence only
    line breaks and whitespace count (code has no sentences).
    """

    def allowed(c: int, sentence: bool) -> bool:
        fence = fences.around(c)
        if fence is None:
            return True
        return not sentence and fence[1] - fence[0] > size

    levels = []
    for pattern in (_SENTENCE_END, _LINE_BREAK, _WHITESPACE):
        sentence = pattern is _SENTENCE_END
        cuts = [m.end() if sentence else m.start() for m in pattern.finditer(text, pos + 1, limit + 1)]
        levels.append([c for c in cuts if c <= limit and allowed(c, sentence)])
    for lowest in (pos + size // 2, pos + 1):
        for cuts in levels:
            if cuts and cuts[-1] >= lowest:
                return cuts[-1]
    return limit
