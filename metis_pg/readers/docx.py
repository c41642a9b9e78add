"""Word (.docx) with python-docx: sections between Title and Heading 1 … 9 paragraphs.

Rules:

- A paragraph styled Title (level 0) or Heading N (level N) sets the heading
  path; every other paragraph is body text, in document order.
- A table's rows are body paragraphs, cells joined by ``" | "`` (a cell
  merged across columns counted once; one merged down rows repeated on each).
- Before anything is inflated, the file must be a zip holding
  ``word/document.xml`` whose entries add up to at most MAX_UNZIPPED_BYTES
  uncompressed, none of over 1 MB inflating more than MAX_INFLATION times its
  compressed size (Word's XML inflates 5-25 times; a zip bomb hundreds).
- Bounded memory: ``word/document.xml`` is parsed as a stream (lxml's
  ``iterparse`` with python-docx's element classes), one top-level paragraph or
  table at a time, each freed once read; one holding over MAX_BLOCK_ELEMENTS XML
  elements is refused. Style names come from the styles part alone. So memory
  follows the largest paragraph or table, not the file (a 550 KB file of 190 MB
  of XML took 2.46 GB through python-docx's whole tree).
- The main part and the styles part must be declared with their Word content
  types in ``[Content_Types].xml``; a file that is not says which part is wrong.
- The file's time budget grows with its inflated XML (``grant_for``).
- Title: the first Title paragraph, else the first Heading 1, else the file name.
- No line or page numbers (a .docx has no fixed pages).
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator

from docx.table import Table, _Cell

from ..errors import UnreadableDocument
from ._common import HeadingPath, TextBuilder, check_time_budget, collapse, file_title, grant_for, unreadable
from .document import Document
from .metadata import Metadata, from_mapping, parse_date

__all__ = ["MAX_UNZIPPED_BYTES", "read"]

#: Largest total uncompressed size (bytes) of a .docx's zip entries.
MAX_UNZIPPED_BYTES = 200_000_000
#: Most times an entry of over 1 MB may inflate its compressed size.
MAX_INFLATION = 100
#: Most XML elements one top-level paragraph or table may hold (its tree is in memory while read).
MAX_BLOCK_ELEMENTS = 500_000
_MAIN = "word/document.xml"
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
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
    for info in infos:
        if info.file_size > 1_000_000 and info.file_size > MAX_INFLATION * max(1, info.compress_size):
            raise unreadable(path, f"zip bomb? {info.filename} inflates {info.compress_size:,} bytes to "
                                   f"{info.file_size:,}, over {MAX_INFLATION} times (Word's XML inflates 5-25 times)")


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


def _declared_types(archive: zipfile.ZipFile) -> tuple[dict[str, str], dict[str, str]] | None:
    """``(defaults by extension, overrides by part name)`` of ``[Content_Types].xml``, or None without one."""
    if "[Content_Types].xml" not in archive.namelist():
        return None
    types = _small_xml(archive, "[Content_Types].xml")
    defaults = {e.get("Extension", "").lower(): e.get("ContentType", "")
                for e in types.iter(f"{{{_CONTENT_TYPES}}}Default")}
    overrides = {e.get("PartName", "").lstrip("/"): e.get("ContentType", "")
                 for e in types.iter(f"{{{_CONTENT_TYPES}}}Override")}
    return defaults, overrides


def _small_xml(archive: zipfile.ZipFile, name: str):
    """The parsed XML of a part of at most 20 MB inflated (content types, relationships, styles)."""
    from lxml import etree

    if archive.getinfo(name).file_size > 20_000_000:
        raise ValueError(f"{name} is over 20 MB")
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    return etree.fromstring(archive.read(name), parser)


def _linked_parts(archive: zipfile.ZipFile) -> dict[str, str]:
    """Relationship kind (``styles``, ``header``, ...) -> part name, of the main document's relationships."""
    import posixpath

    rels_name = "word/_rels/document.xml.rels"
    if rels_name not in archive.namelist():
        return {}
    found: dict[str, str] = {}
    for rel in _small_xml(archive, rels_name):
        if rel.tag != f"{{{_PACKAGE_RELS}}}Relationship" or rel.get("TargetMode") == "External":
            continue
        kind = (rel.get("Type") or "").removeprefix(_OFFICE_RT)
        found.setdefault(kind, posixpath.normpath(posixpath.join("word", rel.get("Target") or "")))
    return found


def _wrong_part(archive: zipfile.ZipFile, kinds: tuple[str, ...] = ("styles",)) -> str | None:
    """Say which part this reader needs is declared or built wrongly, or None.

    The main document and the parts of `kinds` it links to must carry their Word content
    type in ``[Content_Types].xml`` (as python-docx and Word require), and the main
    document's root must be ``w:document``.
    """
    import posixpath

    from lxml import etree

    declared_types = _declared_types(archive)
    if declared_types is None:
        return "it has no [Content_Types].xml, the list of what each part holds"
    defaults, overrides = declared_types

    def declared(part: str) -> str | None:
        return overrides.get(part, defaults.get(posixpath.splitext(part)[1].lstrip(".").lower()))

    if declared(_MAIN) != _WML + "document.main+xml":
        return (f"[Content_Types].xml declares {_MAIN} as {declared(_MAIN)!r}, not a Word document "
                f"({_WML}document.main+xml): a template, a macro-enabled file or another format renamed")
    with archive.open(_MAIN) as stream:
        for _, root in etree.iterparse(stream, events=("start",), resolve_entities=False, no_network=True):
            if root.tag != f"{_W}document":
                return f"{_MAIN} holds <{etree.QName(root).localname}>, not a Word document (<w:document>)"
            break
    names = set(archive.namelist())
    for kind, target in _linked_parts(archive).items():
        if kind not in kinds or kind not in _PART_TYPES:
            continue
        what, expected = _PART_TYPES[kind]
        if target not in names:
            return f"the document links to {what} in {target}, which is missing from the archive"
        if declared(target) != expected:
            return f"[Content_Types].xml declares {target} ({what}) as {declared(target)!r}, not {expected}"
    return None


def _style_levels(archive: zipfile.ZipFile) -> tuple[dict[str, int | None], int | None]:
    """``({paragraph style id: heading level or None}, level of the default paragraph style)``.

    As python-docx resolves a paragraph's style: its ``w:pStyle`` id among the
    paragraph styles, else (no id, an unknown one) the default paragraph style.
    """
    target = _linked_parts(archive).get("styles")
    if target is None or target not in archive.namelist():
        return {}, None
    levels: dict[str, int | None] = {}
    default = None
    for style in _small_xml(archive, target).iter(f"{_W}style"):
        if style.get(f"{_W}type", "paragraph") != "paragraph":
            continue
        name = style.find(f"{_W}name")
        level = _level(name.get(f"{_W}val", "") if name is not None else "")
        style_id = style.get(f"{_W}styleId")
        if style_id is not None:
            levels.setdefault(style_id, level)
        if style.get(f"{_W}default") in ("1", "true", "on"):
            default = level
    return levels, default


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
    """Return the Document of a .docx file's bytes (rules in the module docstring).

    Raises:
        UnreadableDocument: not a zip, no Word document inside, zip bomb, a part declared
            wrongly, a paragraph or table too large, or corrupt XML.
    """
    _check_zip(path, data)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            wrong = _wrong_part(archive)
            if wrong is not None:
                raise unreadable(path, f"corrupt .docx: {wrong}")
            grant_for(size_bytes=archive.getinfo(_MAIN).file_size)  # the budget grows with the XML
            levels, default_level = _style_levels(archive)
            with archive.open(_MAIN) as stream:
                out, title = _extract(path, stream, levels, default_level)
            meta = _metadata(archive)
    except UnreadableDocument:  # refused above, or the time budget ran out
        raise
    except Exception as exc:
        if type(exc).__name__ == "XMLSyntaxError":  # lxml's message says where: worth showing
            raise unreadable(path, f"corrupt .docx: its XML is broken ({exc})") from exc
        raise unreadable(path, f"corrupt .docx: its XML is not what Word writes ({type(exc).__name__})") from exc
    return Document(path, title or file_title(path), "docx", tuple(out.sections), out.text, meta=meta)


#: docProps/core.xml (Office Open XML core properties): element (namespace URI, name) -> metadata key.
_CORE = {
    ("http://purl.org/dc/elements/1.1/", "creator"): "author",
    ("http://schemas.openxmlformats.org/package/2006/metadata/core-properties", "category"): "category",
    ("http://schemas.openxmlformats.org/package/2006/metadata/core-properties", "keywords"): "keywords",
    ("http://purl.org/dc/elements/1.1/", "subject"): "subject",
    ("http://purl.org/dc/elements/1.1/", "language"): "lang",
    ("http://purl.org/dc/terms/", "created"): "date",
    ("http://purl.org/dc/terms/", "modified"): "modified",
    ("http://schemas.openxmlformats.org/package/2006/metadata/core-properties", "lastModifiedBy"): "last_modified_by",
    ("http://purl.org/dc/elements/1.1/", "description"): "comments",
    ("http://schemas.openxmlformats.org/package/2006/metadata/core-properties", "contentStatus"): "status",
    ("http://schemas.openxmlformats.org/package/2006/metadata/core-properties", "version"): "version",
}
#: A core.xml larger than this is not read (bytes): it is a few hundred bytes in what Word writes.
_CORE_MAX_BYTES = 1_000_000


def _metadata(archive: zipfile.ZipFile) -> Metadata:
    """Return the core properties (docProps/core.xml): author, category, keywords, subject, language,
    created (the date), modified, ... A missing, oversized or broken core.xml gives no metadata,
    never a refusal: the text is what matters. Parsed with entities and the network off."""
    from lxml import etree

    try:
        info = archive.getinfo("docProps/core.xml")
        if info.file_size > _CORE_MAX_BYTES:
            return Metadata()
        parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
        root = etree.fromstring(archive.read(info), parser)
    except Exception:  # noqa: BLE001 - no core properties, or unreadable ones
        return Metadata()
    found: dict[str, object] = {}
    for element in root:
        if not isinstance(element.tag, str):
            continue
        qname = etree.QName(element)
        key = _CORE.get((qname.namespace, qname.localname))
        text = (element.text or "").strip()
        if key and text:
            found[key] = parse_date(text) or text if key in ("date", "modified") else text
    return from_mapping(found)


def _extract(path: str, stream, levels: dict[str, int | None],
             default_level: int | None) -> tuple[TextBuilder, str | None]:
    """Return the document's text with its sections, and its title (None when it has no heading).

    The body's paragraphs and tables are read as they end in the stream (python-docx's
    ``iter_inner_content`` order: the direct children of ``w:body``), then freed.
    """
    from docx.oxml.parser import element_class_lookup
    from lxml import etree

    out = TextBuilder()
    headings = HeadingPath()
    title = first_h1 = None
    body_tag, p_tag, tbl_tag = f"{_W}body", f"{_W}p", f"{_W}tbl"
    events = etree.iterparse(stream, events=("end",), resolve_entities=False, no_network=True)
    events.set_element_class_lookup(element_class_lookup)  # CT_P, CT_Tbl, ...: python-docx's own text rules
    inside = 0  # elements ended since the last top-level block
    blocks = 0
    for _, element in events:
        inside += 1
        parent = element.getparent()
        if parent is None or parent.tag != body_tag:
            if inside > MAX_BLOCK_ELEMENTS:
                raise unreadable(path, f"zip bomb? one paragraph or table holds over {MAX_BLOCK_ELEMENTS:,} "
                                       "XML elements")
            if not inside & 65535:
                check_time_budget()
            continue
        blocks += 1
        if not blocks & 1023:
            check_time_budget()
        if element.tag == tbl_tag:
            for row_text in _table_rows(Table(element, None)):
                out.body(row_text, headings.path)
        elif element.tag == p_tag:
            text = collapse(element.text)
            style_id = element.style  # the pStyle id
            level = levels[style_id] if style_id in levels else default_level
            if level is None:
                out.body(text, headings.path)
            else:
                headings.push(level, text)
                out.heading(text)
                if level == 0 and title is None:
                    title = text or None
                if level == 1 and first_h1 is None:
                    first_h1 = text or None
        # Free what was read: this block's tree and every body child before it.
        inside = 0
        element.clear()
        while element.getprevious() is not None:
            del parent[0]
    return out, title or first_h1
