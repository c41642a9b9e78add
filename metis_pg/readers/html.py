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
from html.parser import HTMLParser

from bs4 import BeautifulSoup, CData, NavigableString, Tag
from bs4.dammit import EncodingDetector

from ..errors import UnreadableDocument
from ._common import HeadingPath, TextBuilder, check_time_budget, collapse, decode_text, file_title, unreadable
from .metadata import Metadata, from_mapping
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


#: Inline tags: no heading scope ends with one (the walker marks only the end of the others).
_INLINE = {
    "a", "abbr", "acronym", "b", "bdi", "bdo", "big", "cite", "code", "data", "del", "dfn", "em", "font", "i",
    "img", "ins", "kbd", "label", "mark", "q", "s", "samp", "small", "span", "strike", "strong", "sub", "sup",
    "time", "tt", "u", "var", "wbr", "br",
}  # fmt: skip
#: Boilerplate by tag name: navigation and sidebars always; page headers and footers outside an article.
_NAV_TAGS = {"nav", "aside"}
_PAGE_TAGS = {"header", "footer"}
_NAV_ROLES = {"navigation", "banner", "contentinfo", "complementary", "search", "menu", "menubar", "toolbar"}
#: Pieces of a class or id (split at ``-``, ``_``, space) that name navigation or page furniture.
_NAV_PIECES = {
    "nav", "navbar", "navheader", "navfooter", "navigation", "navlinks", "breadcrumb", "breadcrumbs", "sidebar",
    "sphinxsidebar", "sidenav", "menu", "menubar", "related", "pagination", "pager", "skiplink", "skip",
    "cookie", "cookies", "banner", "masthead",
    "toc", "toctree",  # a page's table of contents (DocBook div.toc, Sphinx toctree-wrapper): links, not text
}  # fmt: skip
#: Pieces naming a page header or footer: dropped unless the element holds a heading (a ``page-header`` <h1>).
_FURNITURE_PIECES = {"header", "footer", "topbar", "bottombar"}
_PIECE = re.compile(r"[-_\s]+")


#: Ancestors looked at above an element (a page nested deeper is tag soup: linear time first).
MAX_ANCESTORS = 256


def _ancestors(node: Tag) -> Iterator[Tag]:
    """The element's parents, innermost first, at most MAX_ANCESTORS of them."""
    for n, parent in enumerate(node.parents):
        if n >= MAX_ANCESTORS:
            return
        yield parent


def _pieces(node: Tag) -> set[str]:
    names = node.get("class") or []
    if isinstance(names, str):
        names = [names]
    ident = node.get("id")
    text = " ".join([*names, ident if isinstance(ident, str) else ""]).lower()
    return set(_PIECE.split(text)) if text.strip() else set()


def _is_boilerplate(node: Tag) -> bool:
    """True for navigation, sidebars, page headers and footers (module docstring: what stays out)."""
    name = node.name
    if name in _NAV_TAGS:
        return True
    if name in _PAGE_TAGS:
        return not any(p.name in ("article", "main") for p in _ancestors(node))
    if not node.attrs:
        return False
    role = node.get("role")
    if isinstance(role, str) and role.strip().lower() in _NAV_ROLES:
        return True
    if name in ("html", "body", "main", "article"):
        return False
    pieces = _pieces(node)
    if not pieces:
        return False
    if pieces & _NAV_PIECES:
        return True
    return bool(pieces & _FURNITURE_PIECES) and not _find_below(node, heading=True)


#: Nodes looked at below an element to find text or a heading in it (past that: assumed found).
MAX_LOOKAHEAD_NODES = 300


def _find_below(node: object, heading: bool) -> bool:
    """True when ``node`` holds non-blank text (``heading``: a heading element), looking at no more
    than MAX_LOOKAHEAD_NODES nodes (bs4's own searches first walk the whole subtree)."""
    stack = [node]
    for _ in range(MAX_LOOKAHEAD_NODES):
        if not stack:
            return False
        n = stack.pop()
        if isinstance(n, Tag):
            if n.name in _DROPPED:
                continue
            if heading and n.name in _HEADINGS:
                return True
            stack.extend(reversed(n.contents))
        elif not heading and type(n) in (NavigableString, CData) and not n.isspace() and n:
            return True
    return bool(stack)


def _has_text(node: object) -> bool:
    return _find_below(node, heading=False)


def _scope(heading: Tag) -> Tag | None:
    """Return the element a heading labels the rest of: its nearest ancestor holding text after it
    (a ``<div class="note"><h3>Note</h3><p>…`` box, a ``<section>``, else the body), not inline."""
    node = heading
    for parent in _ancestors(heading):
        if parent.name not in _INLINE and any(_has_text(sibling) for sibling in node.next_siblings):
            return parent
        node = parent
    return None


def _inside(node: Tag | None, container: object) -> bool:
    """True when ``node`` is a strict descendant of ``container`` (an element)."""
    if node is None or not isinstance(container, Tag) or node is container:
        return False
    return any(parent is container for parent in _ancestors(node))


def _main_content(soup: BeautifulSoup) -> Tag:
    """Return the page's ``<main>`` (or ``role="main"``) element when it has text, else the whole page."""
    main = soup.find("main") or soup.find(attrs={"role": "main"})
    if isinstance(main, Tag) and _has_text(main):
        return main
    return soup


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
        if node.name in _BLOCKS or (self._scopes and self._scopes[-1][0] is node):
            self.flush()
        while self._scopes and self._scopes[-1][0] is node:
            self.path.restore(self._scopes.pop()[1])

    def tag(self, node: Tag, stack: list[tuple[object, bool]]) -> None:
        name = node.name
        if name in _DROPPED or ((name in _BOILERPLATE_CANDIDATES or node.attrs) and _is_boilerplate(node)):
            return
        if name in _HEADINGS:
            self.flush()
            heading = collapse(node.get_text())
            scope = _scope(node)
            if scope is not None and not (self._scopes and self._scopes[-1][0] is scope):
                self._scopes.append((scope, self.path.snapshot()))
            level = _HEADINGS[name]
            deepest = self.path.deepest
            if deepest is not None and deepest[0] >= level and deepest[0] % 1 == 0 and _inside(scope, deepest[1]):
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
        if name in _CELLS and self._buffer_has_text:
            self._add(" | ")
        if name == "br":
            self._add(" ")
        if name in _BLOCKS:
            self.flush()
        line = self._content_line(node)
        if line is not None:
            self._anchors.append((self._buffer_len, line))
        if name not in _INLINE:
            stack.append((node, True))
        stack.extend((child, False) for child in reversed(node.contents))


_BOILERPLATE_CANDIDATES = _NAV_TAGS | _PAGE_TAGS


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


#: Permalink anchors generators put after each heading (Sphinx ``<a class="headerlink">¶</a>``,
#: MkDocs, Docusaurus ``hash-link``): a sign, not a word of the heading or of the text.
_PERMALINK_CLASSES = {"headerlink", "permalink", "anchorlink", "anchor-link", "hash-link", "header-anchor"}
_PERMALINK_SIGNS = {"¶", "#", "§", "🔗", ""}


def _drop_permalinks(soup: BeautifulSoup) -> None:
    """Remove permalink anchors (one linear pass over the ``<a>`` elements)."""
    for a in soup.find_all("a"):
        classes = a.get("class") or []
        if isinstance(classes, str):
            classes = classes.split()
        if _PERMALINK_CLASSES.intersection(classes) and a.get_text().strip() in _PERMALINK_SIGNS:
            a.decompose()


#: Characters of HTML above which a page is read as a stream (:class:`_Stream`), not as a tree:
#: BeautifulSoup's tree takes ~175 bytes of memory per character (8 MB of HTML: 1.4 GB).
MAX_TREE_CHARS = 2_000_000


class _Stream(HTMLParser):
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
        if tag in _DROPPED:
            self._dropped.append(tag)
            return
        if self._dropped:
            return
        if tag in _HEADINGS:
            self.flush()
            self._heading = (_HEADINGS[tag], [])
        elif tag == "pre" and self._pre is None:
            self.flush()
            self._pre, self._pre_line = [], self.getpos()[0]
        elif tag in _CELLS and self._has_text:
            self._buffer.append(" | ")
        elif tag == "br":
            self._buffer.append(" ")
        elif tag in _BLOCKS:
            self.flush()

    def handle_endtag(self, tag: str) -> None:
        self._tick()
        if tag in self._dropped:
            while self._dropped and self._dropped.pop() != tag:
                pass
            return
        if self._dropped:
            return
        if tag in _HEADINGS and self._heading is not None:
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
        elif tag in _BLOCKS:
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


def _read_stream(path: str, text: str) -> Document:
    """Read a page over :data:`MAX_TREE_CHARS` with :class:`_Stream`, fed 64 KB at a time."""
    stream = _Stream()
    for start in range(0, len(text), 65536):
        stream.feed(text[start:start + 65536])
        check_time_budget()
    stream.close()
    stream.flush()
    title = collapse("".join(stream.title)) or stream.first_h1 or file_title(path)
    warning = (f"a page of {len(text):,} characters of HTML, over {MAX_TREE_CHARS:,}: read as a stream, so "
               "its navigation, headers and footers are kept with its text")
    return Document(path, title, "html", tuple(stream.out.sections), stream.out.text, (warning,))


def read(path: str, data: bytes) -> Document:
    """Return the Document of an HTML file's bytes (a page over :data:`MAX_TREE_CHARS`: :func:`_read_stream`).

    Raises:
        UnreadableDocument: binary, undecodable or unparseable content.
    """
    declared = EncodingDetector.find_declared_encoding(data, is_html=True)
    text = decode_text(data, path, declared=declared)
    if len(text) > MAX_TREE_CHARS:
        try:
            return _read_stream(path, _defuse(text))
        except UnreadableDocument:
            raise
        except Exception as exc:
            raise unreadable(path, f"unparseable HTML ({type(exc).__name__}: {exc})") from exc
    try:
        with _gc_paused():
            source = _defuse(text)
            soup = BeautifulSoup(source, "html.parser")
            _drop_permalinks(soup)
            walker = _Walker(source)
            walker.walk(_main_content(soup))
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
