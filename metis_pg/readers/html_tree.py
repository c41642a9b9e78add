"""What the parsed tree of an HTML page says about an element (for :mod:`.html`'s walk).

- Boilerplate (:func:`is_boilerplate`): navigation and sidebars (``<nav>``, ``<aside>``,
  ARIA navigation roles, classes and ids naming navigation, a table of contents), page
  headers and footers outside an ``<article>``/``<main>`` (by tag, or by class or id
  unless they hold a heading).
- The main content (:func:`main_content`): the page's ``<main>`` when it has text.
- A heading's scope (:func:`heading_scope`): the element whose rest it labels.
- Permalink anchors after headings (:func:`drop_permalinks`).

Each question looks at a bounded number of nodes (:data:`MAX_ANCESTORS`,
:data:`MAX_LOOKAHEAD_NODES`), so tag soup stays linear.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from bs4 import BeautifulSoup, CData, NavigableString, Tag

from .html_tags import DROPPED, HEADINGS, INLINE

__all__ = ["BOILERPLATE_CANDIDATES", "ancestors", "drop_permalinks", "has_text", "heading_scope", "inside",
           "is_boilerplate", "main_content"]

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


def ancestors(node: Tag) -> Iterator[Tag]:
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


def is_boilerplate(node: Tag) -> bool:
    """True for navigation, sidebars, page headers and footers (module docstring: what stays out)."""
    name = node.name
    if name in _NAV_TAGS:
        return True
    if name in _PAGE_TAGS:
        return not any(p.name in ("article", "main") for p in ancestors(node))
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
            if n.name in DROPPED:
                continue
            if heading and n.name in HEADINGS:
                return True
            stack.extend(reversed(n.contents))
        elif not heading and type(n) in (NavigableString, CData) and not n.isspace() and n:
            return True
    return bool(stack)


def has_text(node: object) -> bool:
    return _find_below(node, heading=False)


def heading_scope(heading: Tag) -> Tag | None:
    """Return the element a heading labels the rest of: its nearest ancestor holding text after it
    (a ``<div class="note"><h3>Note</h3><p>…`` box, a ``<section>``, else the body), not inline."""
    node = heading
    for parent in ancestors(heading):
        if parent.name not in INLINE and any(has_text(sibling) for sibling in node.next_siblings):
            return parent
        node = parent
    return None


def inside(node: Tag | None, container: object) -> bool:
    """True when ``node`` is a strict descendant of ``container`` (an element)."""
    if node is None or not isinstance(container, Tag) or node is container:
        return False
    return any(parent is container for parent in ancestors(node))


def main_content(soup: BeautifulSoup) -> Tag:
    """Return the page's ``<main>`` (or ``role="main"``) element when it has text, else the whole page."""
    main = soup.find("main") or soup.find(attrs={"role": "main"})
    if isinstance(main, Tag) and has_text(main):
        return main
    return soup


#: Tags that are boilerplate by name alone (others only with attributes).
BOILERPLATE_CANDIDATES = _NAV_TAGS | _PAGE_TAGS


#: Permalink anchors generators put after each heading (Sphinx ``<a class="headerlink">¶</a>``,
#: MkDocs, Docusaurus ``hash-link``): a sign, not a word of the heading or of the text.
_PERMALINK_CLASSES = {"headerlink", "permalink", "anchorlink", "anchor-link", "hash-link", "header-anchor"}
_PERMALINK_SIGNS = {"¶", "#", "§", "🔗", ""}


def drop_permalinks(soup: BeautifulSoup) -> None:
    """Remove permalink anchors (one linear pass over the ``<a>`` elements)."""
    for a in soup.find_all("a"):
        classes = a.get("class") or []
        if isinstance(classes, str):
            classes = classes.split()
        if _PERMALINK_CLASSES.intersection(classes) and a.get_text().strip() in _PERMALINK_SIGNS:
            a.decompose()
