"""A page too large for a tree (over :data:`metis_pg.readers.html.MAX_TREE_CHARS`), read as a stream."""

from __future__ import annotations

from html.parser import HTMLParser

from ._common import HeadingPath, TextBuilder, check_time_budget, collapse, file_title
from .document import Document
from .html_tags import BLOCKS, CELLS, DROPPED, HEADINGS

__all__ = ["Stream", "read_stream"]


class Stream(HTMLParser):
    """A page too large for a tree, read in one pass with memory bounded by its largest block.

    Kept: the dropped elements (``<script>``, ``<head>``, ...) stay out, ``<h1>`` …
    ``<h6>`` set the heading path (no heading scopes: a heading holds until the next
    one of its level or higher), each block element gives a Section with its source
    line, table cells are joined by ``" | "``, ``<pre>`` keeps its whitespace.
    Not done (it needs the tree): boilerplate removal and ``<main>`` detection.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out = TextBuilder()
        self.path = HeadingPath()
        self.first_h1: str | None = None
        self.title: list[str] = []
        self._dropped: list[str] = []  # open dropped elements, innermost last
        self._heading: tuple[int, list[str]] | None = None
        self._pre: list[str] | None = None
        self._pre_line: int | None = None
        self._buffer: list[str] = []
        self._line: int | None = None
        self._has_text = False
        self._events = 0

    def _tick(self) -> None:
        self._events += 1
        if not self._events & 4095:
            check_time_budget()

    def flush(self) -> None:
        if self._buffer:
            self.out.body(collapse("".join(self._buffer)), self.path.path, line=self._line)
        self._buffer, self._line, self._has_text = [], None, False

    def handle_starttag(self, tag: str, attrs) -> None:
        self._tick()
        if tag == "body":
            self._dropped.clear()  # a <head> never closed ends here
        if tag in DROPPED:
            self._dropped.append(tag)
            return
        if self._dropped:
            return
        if tag in HEADINGS:
            self.flush()
            self._heading = (HEADINGS[tag], [])
        elif tag == "pre" and self._pre is None:
            self.flush()
            self._pre, self._pre_line = [], self.getpos()[0]
        elif tag in CELLS and self._has_text:
            self._buffer.append(" | ")
        elif tag == "br":
            self._buffer.append(" ")
        elif tag in BLOCKS:
            self.flush()

    def handle_endtag(self, tag: str) -> None:
        self._tick()
        if tag in self._dropped:
            while self._dropped and self._dropped.pop() != tag:
                pass
            return
        if self._dropped:
            return
        if tag in HEADINGS and self._heading is not None:
            level, parts = self._heading
            self._heading = None
            heading = collapse("".join(parts))
            self.path.push(level, heading)
            self.out.heading(heading)
            if level == 1 and self.first_h1 is None and heading:
                self.first_h1 = heading
        elif tag == "pre" and self._pre is not None:
            raw, self._pre = "".join(self._pre), None
            lead = raw[: len(raw) - len(raw.lstrip())]
            self.out.body(raw, self.path.path, line=self._pre_line + lead.count("\n"))
        elif tag in BLOCKS:
            self.flush()

    def handle_data(self, data: str) -> None:
        if self._dropped:
            if self._dropped[-1] == "title":
                self.title.append(data)
            return
        if self._heading is not None:
            self._heading[1].append(data)
        elif self._pre is not None:
            self._pre.append(data)
        else:
            if self._line is None and data.strip():  # getpos(): where this data starts
                self._line = self.getpos()[0] + data[: len(data) - len(data.lstrip())].count("\n")
            if not self._has_text and not data.isspace():
                self._has_text = True
            self._buffer.append(data)


def read_stream(path: str, text: str, limit: int) -> Document:
    """Read a page of more than `limit` characters (named in its warning) with :class:`Stream`, fed 64 KB at a time.

    Raises:
        TimeBudgetExceeded: the file's time budget ran out.
    """
    stream = Stream()
    for start in range(0, len(text), 65536):
        stream.feed(text[start:start + 65536])
        check_time_budget()
    stream.close()
    stream.flush()
    title = collapse("".join(stream.title)) or stream.first_h1 or file_title(path)
    warning = (f"a page of {len(text):,} characters of HTML, over {limit:,}: read as a stream, so "
               "its navigation, headers and footers are kept with its text")
    return Document(path, title, "html", tuple(stream.out.sections), stream.out.text, (warning,))
