"""Word (.docx) with python-docx: sections between Title and Heading 1 … 9 paragraphs.

Rules:

- A paragraph styled Title (level 0) or Heading N (level N) sets the heading
  path; every other paragraph is body text, in document order.
- A table's rows are body paragraphs, cells joined by ``" | "`` (a cell
  merged across columns counted once; one merged down rows repeated on each).
- Before python-docx opens it, the file must be a zip holding
  ``word/document.xml`` whose entries add up to at most MAX_UNZIPPED_BYTES
  uncompressed (a zip bomb is refused without inflating anything).
- Title: the first Title paragraph, else the first Heading 1, else the file name.
- No line or page numbers (a .docx has no fixed pages).
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator

import docx
from docx.table import Table, _Cell

from ..errors import UnreadableDocument
from ._common import HeadingPath, TextBuilder, check_time_budget, collapse, file_title, unreadable
from .document import Document
from .metadata import Metadata, from_mapping

__all__ = ["MAX_UNZIPPED_BYTES", "read"]

#: Largest total uncompressed size (bytes) of a .docx's zip entries.
MAX_UNZIPPED_BYTES = 200_000_000
_HEADING_STYLE = re.compile(r"heading ([1-9])", re.I)


def _check_zip(path: str, data: bytes) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
    except zipfile.BadZipFile as exc:
        raise unreadable(path, "not a .docx: not a zip archive (corrupt or another format)") from exc
    if "word/document.xml" not in {info.filename for info in infos}:
        raise unreadable(path, "not a .docx: no word/document.xml in the archive")
    unzipped = sum(info.file_size for info in infos)
    if unzipped > MAX_UNZIPPED_BYTES:
        raise unreadable(path, f"zip bomb? {unzipped} bytes uncompressed, over the {MAX_UNZIPPED_BYTES}-byte limit")


def _level(style_name: str) -> int | None:
    if style_name.lower() == "title":
        return 0
    m = _HEADING_STYLE.fullmatch(style_name)
    return int(m.group(1)) if m else None


def _table_rows(table: Table) -> Iterator[str]:
    """Yield the text of each row of `table`: its cells' text joined by ``" | "``, a merged cell once.

    A cell continuing a vertical merge gives the text of the merge's first cell,
    kept per grid column here: python-docx's ``_Row.cells`` finds it by walking up
    one row at a time, recursively (quadratic, and a RecursionError past ~1,000 merged rows).
    """
    above: dict[int, str] = {}  # grid column → text of the cell a vertical merge there started with
    for tr in table._tbl.tr_lst:
        texts = []
        column = tr.grid_before
        for tc in tr.tc_lst:
            if tc.vMerge == "continue":
                text = above.get(column, "")
            else:
                text = collapse(_Cell(tc, table).text)
            above[column] = text
            texts.append(text)
            column += tc.grid_span
        yield " | ".join(t for t in texts if t)


def read(path: str, data: bytes) -> Document:
    """Return the Document of a .docx file's bytes.

    Raises:
        UnreadableDocument: not a zip, no Word document inside, zip bomb, or corrupt XML.
    """
    _check_zip(path, data)
    try:  # python-docx parses lazily: its errors (and lxml's, KeyError, ...) surface while walking
        document = docx.Document(io.BytesIO(data))
        out, title = _extract(document)
    except UnreadableDocument:  # the time budget ran out
        raise
    except Exception as exc:
        raise unreadable(path, f"corrupt .docx ({type(exc).__name__}: {exc})") from exc
    return Document(path, title or file_title(path), "docx", tuple(out.sections), out.text,
                    meta=_metadata(document))


def _metadata(document) -> Metadata:
    """Return the core properties (docProps/core.xml): author, category, keywords, subject, language, dates.

    A property that does not parse (a malformed date) costs only itself.
    """
    found: dict[str, object] = {}
    try:
        props = document.core_properties
    except Exception:
        return Metadata()
    for key, attribute in (("author", "author"), ("category", "category"), ("keywords", "keywords"),
                           ("subject", "subject"), ("lang", "language"), ("date", "created"),
                           ("modified", "modified"), ("last_modified_by", "last_modified_by"),
                           ("comments", "comments"), ("status", "content_status"), ("version", "version")):
        try:
            value = getattr(props, attribute)
        except Exception:
            continue
        if value not in (None, ""):
            found[key] = value
    return from_mapping(found)


def _extract(document) -> tuple[TextBuilder, str | None]:
    """Return the document's text with its sections, and its title (None when it has no heading)."""
    out = TextBuilder()
    headings = HeadingPath()
    title = first_h1 = None
    levels: dict[str | None, int | None] = {}  # python-docx looks a style up by scanning every style
    for n, block in enumerate(document.iter_inner_content()):
        if not n & 1023:
            check_time_budget()
        if isinstance(block, Table):
            for row_text in _table_rows(block):
                out.body(row_text, headings.path)
            continue
        text = collapse(block.text)
        style_id = block._p.style  # the pStyle id; the style's name is looked up once per id
        if style_id not in levels:
            style = block.style
            levels[style_id] = _level(style.name if style is not None else "")
        level = levels[style_id]
        if level is None:
            out.body(text, headings.path)
            continue
        headings.push(level, text)
        out.heading(text)
        if level == 0 and title is None:
            title = text or None
        if level == 1 and first_h1 is None:
            first_h1 = text or None
    return out, title or first_h1
