"""PDF (.pdf) with pypdf: one section per page holding text, so a chunk has one page.

Rules:

- A file without ``%PDF-`` in its first 1,024 bytes or ``%%EOF`` in its last
  1,024 bytes is refused as truncated or corrupt (pypdf would otherwise
  rebuild what it can and index half a document silently).
- An encrypted PDF is opened with the empty password (owner-password-only
  files); when that fails it is refused ("encrypted PDF (needs a password)", or
  "cannot decrypt" with pypdf's reason, e.g. a missing crypto library).
- Each failure says what it is: not a PDF, truncated, corrupt (with pypdf's
  message), encrypted, no pages, text extraction failing on every page (with
  the first page's error), or no text layer (scanned images: OCR first).
- Pages without extractable text, or whose extraction fails, are skipped with
  a warning; a PDF where no page has text is refused with the reason above.
- Running headers and footers are dropped: a line among the first (last) two of a page that is
  there on most pages, at least 3 (case and spacing aside; a line of 40 characters at most
  with its digits aside), is not text (``Shared MIME-info Database``, ``Page 3 of 40``): it
  would leak into every snippet.
- Page labels: when the PDF has them (``/PageLabels``: front matter in roman numerals, a body
  numbered from 1 after it), each section carries its page's printed label (``Section.page_label``;
  a citation says ``p.19 (printed 16)``); without them, None.
- Headings come from the outline (bookmarks), nesting as their level: an entry
  opens its section on its page where its title is found in the page's text
  (case and spacing aside; a short number before it, such as ``2.1``, and a
  short rest of its line go with it), else at the top of that page; the title
  line is then a heading, in no section's text. Entries go in outline order, a
  chunk never crosses one, and the path carries over to the next pages. An
  outline that cannot be read (broken references) is ignored: no headings, as
  for a PDF without one. Title: the metadata title, else the first line of text
  when short, else the file name.

``Document.text`` is the pages' text joined by blank lines.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

from pypdf import PdfReader

from ._common import (
    HeadingPath, TextBuilder, check_time_budget, collapse, file_title, first_line_title, grant_for, unreadable,
)
from .document import Document
from .metadata import Metadata, from_mapping

__all__ = ["read"]


def _open(path: str, data: bytes) -> PdfReader:
    if b"%PDF-" not in data[:1024]:
        raise unreadable(path, "not a PDF (no %PDF- header)")
    if b"%%EOF" not in data[-1024:]:
        raise unreadable(path, "truncated or corrupt PDF (no %%EOF end marker)")
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        encrypted = reader.is_encrypted
    except Exception as exc:  # pypdf's parse errors have no common base worth naming
        raise unreadable(path, f"corrupt PDF ({_why(exc)})") from exc
    if encrypted:
        try:
            opened = reader.decrypt("")
        except Exception as exc:  # unsupported algorithm or missing crypto library
            raise unreadable(path, f"encrypted PDF: cannot decrypt ({_why(exc)})") from exc
        if not opened:
            raise unreadable(path, "encrypted PDF (needs a password)")
    return reader


class _Complaints(logging.Handler):
    """Collects what pypdf logs (a content stream it cannot decompress is logged, not raised)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def _pypdf_complaints() -> Iterator[_Complaints]:
    handler = _Complaints()
    logger = logging.getLogger("pypdf")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def _why(exc: BaseException) -> str:
    """Return ``"<ExceptionType>: <message>"`` cut to 200 characters."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text if len(text) <= 200 else text[:199] + "…"


#: Lines looked at, at the top and at the bottom of a page, for a running header or footer.
_FURNITURE_LINES = 2
_DIGITS = re.compile(r"\d+")


#: A line this short may differ from page to page by its numbers only (``Page 3 of 40``, ``- 17 -``).
_NUMBERED_LINE_CHARS = 40


def _shape(line: str) -> str:
    """A line as running headers repeat it, case and spacing aside; a short one with its digits as ``#``
    (page numbers). A long line must repeat as it is: body lines differ by more than their numbers."""
    text = collapse(line).lower()
    return _DIGITS.sub("#", text) if len(text) <= _NUMBERED_LINE_CHARS else text


def _furniture(texts: list[str]) -> tuple[set[str], set[str]]:
    """Return the shapes of the lines at the top and at the bottom of most pages (at least 3)."""
    pages = [[line for line in t.split("\n") if line.strip()] for t in texts if t.strip()]
    need = max(3, len(pages) // 2 + 1)
    if len(pages) < need:
        return set(), set()
    top: dict[str, int] = {}
    bottom: dict[str, int] = {}
    for lines in pages:
        for shape in {_shape(x) for x in lines[:_FURNITURE_LINES]}:
            top[shape] = top.get(shape, 0) + 1
        for shape in {_shape(x) for x in lines[-_FURNITURE_LINES:]}:
            bottom[shape] = bottom.get(shape, 0) + 1
    return {k for k, n in top.items() if n >= need}, {k for k, n in bottom.items() if n >= need}


def _without_furniture(text: str, top: set[str], bottom: set[str]) -> str:
    """Return a page's text without its running header and footer lines (:func:`_furniture`)."""
    lines = text.split("\n")
    first = [i for i, line in enumerate(lines) if line.strip()]
    drop = {i for i in first[:_FURNITURE_LINES] if _shape(lines[i]) in top}
    drop |= {i for i in first[-_FURNITURE_LINES:] if _shape(lines[i]) in bottom}
    return "\n".join(line for i, line in enumerate(lines) if i not in drop)


#: Outline entries read at most (a PDF may hold a huge or cyclic outline).
MAX_OUTLINE_ENTRIES = 20_000
#: A line's text before or after an outline title that still goes with the heading (characters).
_HEADING_SLACK = 12


def _outline(reader: PdfReader) -> dict[int, list[tuple[int, str]]]:
    """Return the outline as ``{0-based page: [(level, title), ...]}`` in outline order ({} if none or unreadable)."""
    try:
        ordered = _document_order(reader.outline)
    except Exception:  # a broken outline costs the headings only
        return {}
    entries: dict[int, list[tuple[int, str]]] = {}
    for level, title, item in ordered[:MAX_OUTLINE_ENTRIES]:
        try:
            page = reader.get_destination_page_number(item)
        except Exception:
            continue
        if page is not None and page >= 0:
            entries.setdefault(page, []).append((level, title))
    return entries


def _document_order(outline: list) -> list[tuple[int, str, object]]:
    """Flatten pypdf's nested outline (a list after an entry holds its children) in reading order."""
    out: list[tuple[int, str, object]] = []
    stack: list[tuple[list, int, int]] = [(outline, 0, 1)]
    while stack and len(out) <= MAX_OUTLINE_ENTRIES:
        items, index, level = stack.pop()
        if index >= len(items):
            continue
        stack.append((items, index + 1, level))
        item = items[index]
        if isinstance(item, list):
            stack.append((item, 0, level + 1))
            continue
        title = collapse(str(getattr(item, "title", "") or ""))
        if title:
            out.append((level, title, item))
    return out


def _title_pattern(title: str) -> re.Pattern[str]:
    return re.compile(r"\s+".join(re.escape(w) for w in title.split()), re.IGNORECASE)


def _page_sections(out: TextBuilder, path: HeadingPath, text: str, number: int,
                   entries: list[tuple[int, str]]) -> None:
    """Add one page's text, cut where its outline entries' titles are found."""
    pos = 0
    for level, title in entries:
        m = _title_pattern(title).search(text, pos)
        if m is None:  # not found in the text: the entry opens its section here
            path.push(level, title)
            continue
        line_start = text.rfind("\n", 0, m.start()) + 1
        start = line_start if len(text[line_start:m.start()].strip()) <= _HEADING_SLACK else m.start()
        line_end = text.find("\n", m.end())
        line_end = len(text) if line_end < 0 else line_end
        end = line_end if len(text[m.end():line_end].strip()) <= _HEADING_SLACK else m.end()
        out.body(text[pos:start], path.path, page=number)
        path.push(level, title)
        out.heading(collapse(text[start:end]))
        pos = end
    out.body(text[pos:], path.path, page=number)


def read(path: str, data: bytes) -> Document:
    """Return the Document of a PDF's bytes, one section per page with text.

    Raises:
        UnreadableDocument: not a PDF, truncated, corrupt or encrypted PDF, no pages,
            or no page with text (each with its own reason).
    """
    reader = _open(path, data)
    out = TextBuilder()
    warnings: list[str] = []
    blank: list[int] = []
    failed: list[tuple[int, str]] = []
    try:
        pages = list(reader.pages)
    except Exception as exc:
        raise unreadable(path, f"corrupt PDF: pages not readable ({_why(exc)})") from exc
    if not pages:
        raise unreadable(path, "PDF without pages")
    grant_for(pages=len(pages))  # a 10,000-page PDF gets the time its pages need (time_budget)
    outline = _outline(reader)
    headings = HeadingPath()
    texts: list[str | None] = []  # None: extraction failed (said in `failed`)
    complained: list[list[str]] = []
    for number, page in enumerate(pages, start=1):
        check_time_budget()
        with _pypdf_complaints() as complaints:
            try:
                text = page.extract_text() or ""
            except Exception as exc:
                failed.append((number, _why(exc)))
                warnings.append(f"{path}: page {number}: text not extracted ({_why(exc)})")
                text = None
        texts.append(None if text is None else text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", ""))
        complained.append(complaints.messages)
    top, bottom = _furniture([t for t in texts if t])
    for number, (text, messages) in enumerate(zip(texts, complained), start=1):
        if text is None:
            continue
        if text.strip():
            text = _without_furniture(text, top, bottom) if top or bottom else text
            _page_sections(out, headings, text, number, outline.get(number - 1, []))
        elif messages:  # e.g. a content stream pypdf could not decompress
            failed.append((number, messages[0][:200]))
            warnings.append(f"{path}: page {number}: text not extracted ({messages[0][:200]})")
        else:
            blank.append(number)
    count = f"{len(pages)} page{'' if len(pages) == 1 else 's'}"
    if not out.sections and failed and not blank:
        raise unreadable(path, f"corrupt PDF: text extraction failed on every page ({count}; page {failed[0][0]}: {failed[0][1]})")
    if not out.sections and failed:
        raise unreadable(path, f"no text: extraction failed on {len(failed)} of {count} (page {failed[0][0]}: {failed[0][1]}), the others have no text layer")
    if not out.sections:
        raise unreadable(path, f"no text layer: scanned PDF? ({count}, none with text; run OCR first)")
    if blank:
        warnings.append(f"{path}: no text on pages {', '.join(map(str, blank))} (scanned?)")
    try:
        meta_title = collapse(reader.metadata.title or "") if reader.metadata else ""
    except Exception:  # a broken /Info dictionary costs only the title
        meta_title = ""
    title = meta_title or first_line_title(out.text) or file_title(path)
    sections = tuple(out.sections)
    labels = _page_labels(reader, len(pages))
    if labels is not None:
        sections = tuple(dataclasses.replace(s, page_label=labels[s.page - 1]) if s.page else s for s in sections)
    return Document(path, title, "pdf", sections, out.text, tuple(warnings), _metadata(reader))


def _page_labels(reader: PdfReader, count: int) -> list[str] | None:
    """Return the printed label of each page (pypdf's reading of the catalog's ``/PageLabels``), or None
    when the PDF has none, or they cannot be read (a broken number tree costs only the labels)."""
    try:
        if "/PageLabels" not in reader.trailer["/Root"]:
            return None
        labels = list(reader.page_labels)
    except Exception:  # pypdf's errors on a malformed tree have no common base worth naming
        return None
    return [collapse(label)[:40] or None for label in labels] if len(labels) == count else None


def _metadata(reader: PdfReader) -> Metadata:
    """Return the document information dictionary's author, keywords, subject and dates, and the catalog's /Lang.

    Each entry is read on its own: a broken one (a date pypdf cannot parse) costs only itself.
    """
    found: dict[str, object] = {}
    info = None
    try:
        info = reader.metadata
    except Exception:
        pass
    if info is not None:
        for key, attribute in (("author", "author"), ("keywords", "keywords"), ("subject", "subject"),
                               ("date", "creation_date"), ("modified", "modification_date"),
                               ("creator", "creator"), ("producer", "producer")):
            try:
                value = getattr(info, attribute, None) if attribute != "keywords" else info.get("/Keywords")
            except Exception:
                continue
            if value not in (None, ""):
                found["application" if key == "creator" else key] = value if key in ("date", "modified") else str(value)
    try:
        lang = reader.trailer["/Root"].get("/Lang")
        if lang:
            found["lang"] = str(lang)
    except Exception:
        pass
    return from_mapping(found)
