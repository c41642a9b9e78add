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
- Navigation, sidebars, page headers and footers and permalink anchors stay out, and only
  the page's ``<main>`` is read when it has text (:mod:`.html_tree`); a page over
  :data:`MAX_TREE_CHARS` is read as a stream without that (:mod:`.html_stream`).

Parsing uses BeautifulSoup with Python's ``html.parser``: bs4's lxml tree
builder records no source lines (``Tag.sourceline`` is None). Decoding: a BOM,
else UTF-8, else the ``<meta charset>`` the page declares, else detection.

``html.parser`` rescans to the end of the file from every ``<`` that opens a
tag or comment it cannot close (80 KB of ``<a `` took 77 s), so before parsing
(:func:`_defuse`) a ``<!--`` that no ``-->`` follows, and a ``<`` that no ``>``
follows, are text (``&lt;``): they could not be closed anyway.
The walk over the tree is iterative (no recursion limit on nesting depth) and
checks the file's time budget every 4,096 nodes. The cyclic garbage collector
is paused while the tree is built and walked (:func:`_gc_paused`): its full
collections rescan the growing tree, which made a 1 MB page of tags take 10 s
instead of 2 s.
"""

from __future__ import annotations

import bisect
import gc
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from bs4 import BeautifulSoup, CData, NavigableString, Tag
from bs4.dammit import EncodingDetector

from ..errors import UnreadableDocument
from ._common import HeadingPath, TextBuilder, check_time_budget, collapse, decode_text, file_title, unreadable
from .metadata import Metadata, from_mapping
from .document import Document
from .html_stream import read_stream
from .html_tags import BLOCKS, CELLS, DROPPED, HEADINGS, INLINE
from .html_tree import BOILERPLATE_CANDIDATES, drop_permalinks, heading_scope, inside, is_boilerplate, main_content

__all__ = ["read"]

#: Characters of HTML above which a page is read as a stream (:func:`.html_stream.read_stream`), not as a
#: tree: BeautifulSoup's tree takes ~175 bytes of memory per character (8 MB of HTML: 1.4 GB).
MAX_TREE_CHARS = 2_000_000
_WORD = re.compile(r"\S+")


def _collapse_lines(raw: str, line: int | None, anchors: Sequence[tuple[int, int]] = ()
                    ) -> tuple[str, tuple[int, ...], int | None]:
    """Return ``collapse(raw)``, its line map and the source line of its first word.

    The line map holds ``(offset, line)`` pairs: from ``offset`` in the collapsed text on, the
    source line is ``line`` (a pair wherever it changes). A word's line is that of the last
    anchor before it (``(offset in raw, line)``: where an element's content starts in the
    source, newlines inside its start tag counted) plus the newlines of `raw` since; before any
    anchor, `line` (the block's first line; None and no anchors: no map, no line).
    """
    if line is None and not anchors:
        return collapse(raw), (), None
    words: list[str] = []
    line_map: list[int] = []
    size, first, previous = 0, None, None
    pos, current = 0, line  # the line at raw offset `pos` (None: not known yet)
    next_anchor = 0
    for m in _WORD.finditer(raw):
        while next_anchor < len(anchors) and anchors[next_anchor][0] <= m.start():
            pos, current = anchors[next_anchor]
            next_anchor += 1
        if current is not None:  # counted from the last word or anchor: linear in `raw`
            current += raw.count("\n", pos, m.start())
            pos = m.start()
        if words:
            size += 1
        if current is not None:
            if first is None:
                first = current
            elif current != previous:
                line_map += (size, current)
            previous = current
        words.append(m.group())
        size += m.end() - m.start()
    return " ".join(words), tuple(line_map), first


class _Walker:
    """Walks the tree in document order, flushing one body block at each block boundary."""

    def __init__(self, source: str = "") -> None:
        self.out = TextBuilder()
        # The parsed HTML, to find where an element's content starts (after a start tag written
        # over several lines, as DocBook's `<B\nCLASS="COMMAND"\n>`): line starts computed once.
        self._source = source
        self._line_starts = [0, *(m.end() for m in re.finditer("\n", source))]
        self._anchors: list[tuple[int, int]] = []  # (offset in the buffer, line) of each element's content
        self._buffer_len = 0
        self.path = HeadingPath()
        self.first_h1: str | None = None
        self._buffer: list[str] = []
        self._buffer_has_text = False  # some non-whitespace in _buffer (not joined per table cell)
        self._line: int | None = None
        # (element, heading path before its first heading): the element's headings close where it ends.
        self._scopes: list[tuple[Tag, tuple[tuple[int, str], ...]]] = []

    def flush(self) -> None:
        if self._buffer:
            text, line_map, first = _collapse_lines("".join(self._buffer), self._line, self._anchors)
            self.out.body(text, self.path.path, line=first if first is not None else self._line, line_map=line_map)
        self._buffer, self._buffer_has_text, self._line = [], False, None
        self._anchors, self._buffer_len = [], 0

    def _content_line(self, node: Tag) -> int | None:
        """The source line where `node`'s content starts: its start tag's line plus the newlines
        inside that tag (looked for within 4,096 characters: tag soup stays linear)."""
        start = self._offset(node)
        if start is None:
            return None
        end = self._source.find(">", start, start + 4096)
        return node.sourceline + (self._source.count("\n", start, end) if end > start else 0)

    def _add(self, content: str) -> None:
        self._buffer.append(content)
        self._buffer_len += len(content)
        if not self._buffer_has_text and not content.isspace():
            self._buffer_has_text = True

    def _offset(self, node: object) -> int | None:
        """Where the start tag of `node` (an element) is in the parsed HTML; None if not known."""
        if not isinstance(node, Tag) or node.sourceline is None or node.sourcepos is None \
                or node.sourceline > len(self._line_starts):
            return None
        return self._line_starts[node.sourceline - 1] + node.sourcepos

    def _text_line(self, node: NavigableString, content: str) -> int | None:
        """The source line where `content` (a text node) starts: its first 40 characters found in
        the parsed HTML between the start tag of its previous sibling (else its parent) and that of
        its next sibling (else within 8,192 characters). None when not found there: text with an
        entity (``&rsquo;``) is not as it is in the source."""
        probe = content[:40]
        if "&" in probe or not probe.strip():
            return None
        start = self._offset(node.previous_sibling)
        if start is None:
            start = self._offset(node.parent)
        if start is None:
            return None
        end = self._offset(node.next_sibling)
        at = self._source.find(probe, start, end if end is not None and end > start else start + 8192)
        if at < 0:
            return None
        return bisect.bisect_right(self._line_starts, at)

    def text(self, node: NavigableString) -> None:
        content = str(node)
        line = self._text_line(node, content)
        if line is not None:
            self._anchors.append((self._buffer_len, line))
        parent = node.parent
        if self._line is None and content.strip() and parent is not None and parent.sourceline is not None:
            # Exact when the text opens its element; else the element's first line.
            lead = content[: len(content) - len(content.lstrip())]
            self._line = parent.sourceline + (lead.count("\n") if node.previous_sibling is None else 0)
        self._add(content)

    def walk(self, root: Tag) -> None:
        stack: list[tuple[object, bool]] = [(root, False)]
        visited = 0
        while stack:
            visited += 1
            if not visited & 4095:
                check_time_budget()
            node, leaving = stack.pop()
            if leaving:
                self.leave(node)
            elif isinstance(node, Tag):
                self.tag(node, stack)
            elif type(node) in (NavigableString, CData):
                self.text(node)

    def leave(self, node: Tag) -> None:
        if node.name in BLOCKS or (self._scopes and self._scopes[-1][0] is node):
            self.flush()
        while self._scopes and self._scopes[-1][0] is node:
            self.path.restore(self._scopes.pop()[1])

    def tag(self, node: Tag, stack: list[tuple[object, bool]]) -> None:
        name = node.name
        if name in DROPPED or ((name in BOILERPLATE_CANDIDATES or node.attrs) and is_boilerplate(node)):
            return
        if name in HEADINGS:
            self.flush()
            heading = collapse(node.get_text())
            scope = heading_scope(node)
            if scope is not None and not (self._scopes and self._scopes[-1][0] is scope):
                self._scopes.append((scope, self.path.snapshot()))
            level = HEADINGS[name]
            deepest = self.path.deepest
            if deepest is not None and deepest[0] >= level and deepest[0] % 1 == 0 and inside(scope, deepest[1]):
                # A box inside the current section (a note): nested under it, not its sibling. Once
                # only (a box in a box is the box's sibling), so the path stays as short as the levels.
                level = deepest[0] + 0.5
            self.path.push(level, heading, scope)
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
        if name in CELLS and self._buffer_has_text:
            self._add(" | ")
        if name == "br":
            self._add(" ")
        if name in BLOCKS:
            self.flush()
        line = self._content_line(node)
        if line is not None:
            self._anchors.append((self._buffer_len, line))
        if name not in INLINE:
            stack.append((node, True))
        stack.extend((child, False) for child in reversed(node.contents))




_gc_lock = threading.Lock()
_gc_pauses = 0  # readers in _gc_paused now; the collector runs again when the last one leaves


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector (process-wide) while in this block, if it was running.

    Reference counting still frees what is not in a cycle; the tree's cycles are
    collected by the next collection after the block.
    """
    global _gc_pauses
    with _gc_lock:
        was_enabled = _gc_pauses > 0 or gc.isenabled()
        if was_enabled:
            _gc_pauses += 1
            gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            with _gc_lock:
                _gc_pauses -= 1
                if _gc_pauses == 0:
                    gc.enable()


def _defuse(text: str) -> str:
    """Return ``text`` without what makes ``html.parser`` quadratic (see the module docstring).

    Each ``<!--`` after the last ``-->`` becomes ``&lt;!--`` (no comment can close
    there; it may be in a script's string, so what follows is not dropped), and
    each ``<`` after the last ``>`` becomes ``&lt;`` (no tag can close there).
    """
    closed = text.rfind("-->")
    after = closed + 3 if closed >= 0 else 0
    if text.find("<!--", after) >= 0:
        text = text[:after] + text[after:].replace("<!--", "&lt;!--")
    last = text.rfind(">") + 1
    if text.find("<", last) >= 0:
        text = text[:last] + text[last:].replace("<", "&lt;")
    return text


def read(path: str, data: bytes) -> Document:
    """Return the Document of an HTML file's bytes (a page over :data:`MAX_TREE_CHARS`: :func:`read_stream`).

    Raises:
        UnreadableDocument: binary, undecodable or unparseable content.
    """
    declared = EncodingDetector.find_declared_encoding(data, is_html=True)
    text = decode_text(data, path, declared=declared)
    if len(text) > MAX_TREE_CHARS:
        try:
            return read_stream(path, _defuse(text), MAX_TREE_CHARS)
        except UnreadableDocument:
            raise
        except Exception as exc:
            raise unreadable(path, f"unparseable HTML ({type(exc).__name__}: {exc})") from exc
    try:
        with _gc_paused():
            source = _defuse(text)
            soup = BeautifulSoup(source, "html.parser")
            drop_permalinks(soup)
            walker = _Walker(source)
            walker.walk(main_content(soup))
            walker.flush()
            title_tag = soup.find("title")
            title = collapse(title_tag.get_text()) if title_tag else ""
            meta = _metadata(soup)
            sections, full_text = tuple(walker.out.sections), walker.out.text
            soup.decompose()  # breaks the tree's cycles: freed now, not by the collector rescanning it
    except UnreadableDocument:
        raise
    except Exception as exc:  # bs4's ParserRejectedMarkup and html.parser's errors
        raise unreadable(path, f"unparseable HTML ({type(exc).__name__}: {exc})") from exc
    title = title or walker.first_h1 or file_title(path)
    return Document(path, title, "html", sections, full_text, meta=meta)


#: ``<meta name=...>`` / ``<meta property=...>`` → the metadata key it gives (the first found wins).
_META_NAMES = {
    "author": "author", "dc.creator": "author", "article:author": "author",
    "keywords": "keywords", "news_keywords": "keywords", "article:tag": "keywords",
    "category": "category", "article:section": "category",
    "date": "date", "dc.date": "date", "dcterms.created": "date", "article:published_time": "date",
    "dc.date.created": "date",
    "last-modified": "modified", "dcterms.modified": "modified", "article:modified_time": "modified",
    "description": "description", "dc.subject": "subject",
}


def _metadata(soup: BeautifulSoup) -> Metadata:
    """Return the metadata of a page's ``<meta>`` elements and ``<html lang>`` (:data:`_META_NAMES`)."""
    found: dict[str, object] = {}
    for tag in soup.find_all("meta"):
        name = str(tag.get("name") or tag.get("property") or tag.get("itemprop") or "").strip().lower()
        key = _META_NAMES.get(name)
        content = tag.get("content")
        if not key or not isinstance(content, str) or not content.strip():
            continue
        if key == "keywords":  # article:tag repeats: every one counts
            found[key] = f"{found[key]},{content}" if key in found else content
        else:
            found.setdefault(key, content)
    html = soup.find("html")
    lang = html.get("lang") if html is not None else None
    if isinstance(lang, str) and lang.strip():
        found["lang"] = lang
    return from_mapping(found)
