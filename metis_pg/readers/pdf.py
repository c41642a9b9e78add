"""PDF (.pdf) with pypdf: one section per page holding text, so a chunk has one page.

Rules:

- A file without ``%PDF-`` in its first 1,024 bytes or ``%%EOF`` in its last
  1,024 bytes is refused as truncated or corrupt (pypdf would otherwise
  rebuild what it can and index half a document silently).
- An encrypted PDF is opened with the empty password (owner-password-only
  files); when that fails it is refused.
- Pages without extractable text are skipped with a warning; a PDF where no
  page has text is refused ("no text layer": scanned images need OCR first).
- No headings (PDF outlines are not read). Title: the metadata title, else the
  first line of text when short, else the file name.

``Document.text`` is the pages' text joined by blank lines.
"""

from __future__ import annotations

import io

from pypdf import PdfReader

from ._common import TextBuilder, collapse, file_title, first_line_title, unreadable
from .document import Document

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
        raise unreadable(path, f"corrupt PDF ({exc})") from exc
    if encrypted:
        try:
            opened = reader.decrypt("")
        except Exception:  # unsupported algorithm or missing crypto library
            opened = 0
        if not opened:
            raise unreadable(path, "encrypted PDF (needs a password)")
    return reader


def read(path: str, data: bytes) -> Document:
    """Return the Document of a PDF's bytes, one section per page with text.

    Raises:
        UnreadableDocument: truncated, corrupt or encrypted PDF, or no page with text.
    """
    reader = _open(path, data)
    out = TextBuilder()
    warnings: list[str] = []
    blank: list[int] = []
    try:
        pages = list(reader.pages)
    except Exception as exc:
        raise unreadable(path, f"corrupt PDF: pages not readable ({exc})") from exc
    for number, page in enumerate(pages, start=1):
        try:
            text = page.extract_text() or ""
        except Exception as exc:
            warnings.append(f"{path}: page {number}: text not extracted ({exc})")
            continue
        text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
        if text.strip():
            out.body(text, (), page=number)
        else:
            blank.append(number)
    if not out.sections:
        raise unreadable(path, f"no text layer: scanned PDF? ({len(pages)} page{'' if len(pages) == 1 else 's'}, none with text; run OCR first)")
    if blank:
        warnings.append(f"{path}: no text on pages {', '.join(map(str, blank))} (scanned?)")
    try:
        meta_title = collapse(reader.metadata.title or "") if reader.metadata else ""
    except Exception:  # a broken /Info dictionary costs only the title
        meta_title = ""
    title = meta_title or first_line_title(out.sections[0].text) or file_title(path)
    return Document(path, title, "pdf", tuple(out.sections), out.text, tuple(warnings))
