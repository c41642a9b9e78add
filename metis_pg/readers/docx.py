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


_PACKAGE_RELS = "http://schemas.openxmlformats.org/package/2006/relationships"
_CONTENT_TYPES = "http://schemas.openxmlformats.org/package/2006/content-types"
_OFFICE_RT = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/"
_WML = "application/vnd.openxmlformats-officedocument.wordprocessingml."
#: What the parts python-docx reads must be declared as in ``[Content_Types].xml``: relationship type
#: from the main document -> (what the part is, in words; its content type).
_PART_TYPES = {
    "styles": ("styles", _WML + "styles+xml"),
    "numbering": ("numbering", _WML + "numbering+xml"),
    "settings": ("settings", _WML + "settings+xml"),
    "header": ("a header", _WML + "header+xml"),
    "footer": ("a footer", _WML + "footer+xml"),
    "comments": ("comments", _WML + "comments+xml"),
}


def _wrong_part(data: bytes) -> str | None:
    """Say which part of a .docx python-docx failed on is declared or built wrongly, or None.

    Checked after python-docx failed (a file Word opens is never refused by this): the main
    document and the parts it links to (styles, numbering, headers, ...) must carry their Word
    content type in ``[Content_Types].xml``, and the main document's root must be ``w:document``.
    """
    import posixpath
    import xml.etree.ElementTree as ET

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())

            def xml(name: str):
                info = archive.getinfo(name)
                if info.file_size > 20_000_000:
                    return None
                return ET.fromstring(archive.read(name))

            types = xml("[Content_Types].xml") if "[Content_Types].xml" in names else None
            if types is None:
                return "it has no [Content_Types].xml, the list of what each part holds"
            defaults = {e.get("Extension", "").lower(): e.get("ContentType") for e in types.iter(f"{{{_CONTENT_TYPES}}}Default")}
            overrides = {e.get("PartName", "").lstrip("/"): e.get("ContentType")
                         for e in types.iter(f"{{{_CONTENT_TYPES}}}Override")}

            def declared(part: str) -> str | None:
                return overrides.get(part, defaults.get(posixpath.splitext(part)[1].lstrip(".").lower()))

            main = "word/document.xml"
            if declared(main) != _WML + "document.main+xml":
                return (f"[Content_Types].xml declares {main} as {declared(main)!r}, not a Word document "
                        f"({_WML}document.main+xml): a template, a macro-enabled file or another format renamed")
            root = xml(main)
            if root is not None and root.tag != "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}document":
                return f"{main} holds <{root.tag.rpartition('}')[2]}>, not a Word document (<w:document>)"
            rels_name = "word/_rels/document.xml.rels"
            rels = xml(rels_name) if rels_name in names else None
            for rel in (rels if rels is not None else ()):
                if rel.tag != f"{{{_PACKAGE_RELS}}}Relationship" or rel.get("TargetMode") == "External":
                    continue
                kind = (rel.get("Type") or "").removeprefix(_OFFICE_RT)
                if kind not in _PART_TYPES:
                    continue
                what, expected = _PART_TYPES[kind]
                target = posixpath.normpath(posixpath.join("word", rel.get("Target") or ""))
                if target not in names:
                    return f"the document links to {what} in {target}, which is missing from the archive"
                if declared(target) != expected:
                    return (f"[Content_Types].xml declares {target} ({what}) as {declared(target)!r}, "
                            f"not {expected}")
    except (zipfile.BadZipFile, ET.ParseError, KeyError, OSError, RuntimeError, ValueError):
        return None  # broken otherwise: the caller says so
    return None


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
        if type(exc).__name__ == "XMLSyntaxError":  # lxml's message says where: worth showing
            raise unreadable(path, f"corrupt .docx: its XML is broken ({exc})") from exc
        wrong = _wrong_part(data)
        if wrong is not None:
            raise unreadable(path, f"corrupt .docx: {wrong}") from exc
        raise unreadable(path, f"corrupt .docx: its XML is not what Word writes ({type(exc).__name__})") from exc
    return Document(path, title or file_title(path), "docx", tuple(out.sections), out.text)


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
