"""The HTML tag vocabulary the readers share (:mod:`.html`'s tree walk, :mod:`.html_stream`, :mod:`.html_tree`)."""

from __future__ import annotations

__all__ = ["BLOCKS", "CELLS", "DROPPED", "HEADINGS", "INLINE"]

#: Elements whose content is never text of the page.
DROPPED = {"script", "style", "noscript", "template", "head", "title"}
#: Heading element → level.
HEADINGS = {f"h{n}": n for n in range(1, 7)}
#: Block elements: each gives its own Section.
BLOCKS = {
    "address", "article", "aside", "blockquote", "body", "caption", "center", "dd", "details",
    "dialog", "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "header",
    "hgroup", "hr", "html", "legend", "li", "main", "menu", "nav", "ol", "p", "section",
    "summary", "table", "tbody", "tfoot", "thead", "tr", "ul",
}  # fmt: skip
#: Table cells, joined by " | ".
CELLS = {"td", "th"}

#: Inline tags: no heading scope ends with one (the walker marks only the end of the others).
INLINE = {
    "a", "abbr", "acronym", "b", "bdi", "bdo", "big", "cite", "code", "data", "del", "dfn", "em", "font", "i",
    "img", "ins", "kbd", "label", "mark", "q", "s", "samp", "small", "span", "strike", "strong", "sub", "sup",
    "time", "tt", "u", "var", "wbr", "br",
}  # fmt: skip
