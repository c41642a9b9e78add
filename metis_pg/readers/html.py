"""HTML (.html, .htm): sections between ``<h1>`` … ``<h6>``, one per block element.

Rules:

- ``<script>``, ``<style>``, ``<noscript>``, ``<template>`` and ``<head>`` are
  dropped; comments too.
- ``<h1>`` … ``<h6>`` set the heading path (an ``<h2>`` pops every ``<h2>`` or
  deeper above it).
- Each block element (``<p>``, ``<li>``, ``<tr>``, ``<pre>``, ``<div>`` …) gives
  its own Section, whose ``line`` is the source line where its text starts;
  the chunker packs consecutive blocks of one section together. Whitespace is
  collapsed, except in ``<pre>``; table cells are joined by ``" | "``.
- Title: ``<title>``, else the first ``<h1>``, else the file name.

Parsing uses BeautifulSoup with Python's ``html.parser``: bs4's lxml tree
builder records no source lines (``Tag.sourceline`` is None). Decoding: a BOM,
else UTF-8, else the ``<meta charset>`` the page declares, else detection.
"""

from __future__ import annotations

from bs4 import BeautifulSoup, CData, NavigableString, Tag
from bs4.dammit import EncodingDetector

from ._common import HeadingPath, TextBuilder, collapse, decode_text, file_title, unreadable
from .document import Document

__all__ = ["read"]

_DROPPED = {"script", "style", "noscript", "template", "head", "title"}
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_BLOCKS = {
    "address", "article", "aside", "blockquote", "body", "caption", "center", "dd", "details",
    "dialog", "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "header",
    "hgroup", "hr", "html", "legend", "li", "main", "menu", "nav", "ol", "p", "section",
    "summary", "table", "tbody", "tfoot", "thead", "tr", "ul",
}  # fmt: skip
_CELLS = {"td", "th"}


class _Walker:
    """Walks the tree in document order, flushing one body block at each block boundary."""

    def __init__(self) -> None:
        self.out = TextBuilder()
        self.path = HeadingPath()
        self.first_h1: str | None = None
        self._buffer: list[str] = []
        self._line: int | None = None

    def flush(self) -> None:
        self.out.body(collapse("".join(self._buffer)), self.path.path, line=self._line)
        self._buffer, self._line = [], None

    def text(self, node: NavigableString) -> None:
        content = str(node)
        parent = node.parent
        if self._line is None and content.strip() and parent is not None and parent.sourceline is not None:
            # Exact when the text opens its element; else the element's first line.
            lead = content[: len(content) - len(content.lstrip())]
            self._line = parent.sourceline + (lead.count("\n") if node.previous_sibling is None else 0)
        self._buffer.append(content)

    def walk(self, root: Tag) -> None:
        stack: list[tuple[object, bool]] = [(root, False)]
        while stack:
            node, leaving = stack.pop()
            if leaving:
                self.flush()
            elif isinstance(node, Tag):
                self.tag(node, stack)
            elif type(node) in (NavigableString, CData):
                self.text(node)

    def tag(self, node: Tag, stack: list[tuple[object, bool]]) -> None:
        name = node.name
        if name in _DROPPED:
            return
        if name in _HEADINGS:
            self.flush()
            heading = collapse(node.get_text())
            self.path.push(_HEADINGS[name], heading)
            self.out.heading(heading)
            if name == "h1" and self.first_h1 is None and heading:
                self.first_h1 = heading
            return
        if name == "pre":
            self.flush()
            raw = node.get_text()
            lead = raw[: len(raw) - len(raw.lstrip())]
            line = node.sourceline + lead.count("\n") if node.sourceline is not None else None
            self.out.body(raw, self.path.path, line=line)
            return
        if name in _CELLS and "".join(self._buffer).strip():
            self._buffer.append(" | ")
        if name == "br":
            self._buffer.append(" ")
        if name in _BLOCKS:
            self.flush()
            stack.append((node, True))
        stack.extend((child, False) for child in reversed(node.contents))


def read(path: str, data: bytes) -> Document:
    """Return the Document of an HTML file's bytes.

    Raises:
        UnreadableDocument: binary, undecodable or unparseable content.
    """
    declared = EncodingDetector.find_declared_encoding(data, is_html=True)
    text = decode_text(data, path, declared=declared)
    try:
        soup = BeautifulSoup(text, "html.parser")
        walker = _Walker()
        walker.walk(soup)
        walker.flush()
    except Exception as exc:  # bs4's ParserRejectedMarkup and html.parser's errors
        raise unreadable(path, f"unparseable HTML ({type(exc).__name__}: {exc})") from exc
    title_tag = soup.find("title")
    title = (collapse(title_tag.get_text()) if title_tag else "") or walker.first_h1 or file_title(path)
    return Document(path, title, "html", tuple(walker.out.sections), walker.out.text)
