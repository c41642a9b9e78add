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
- No headings (PDF outlines are not read). Title: the metadata title, else the
  first line of text when short, else the file name.

``Document.text`` is the pages' text joined by blank lines.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from pypdf import PdfReader

from ._common import TextBuilder, check_time_budget, collapse, file_title, first_line_title, unreadable
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
    for number, page in enumerate(pages, start=1):
        check_time_budget()
        with _pypdf_complaints() as complaints:
            try:
                text = page.extract_text() or ""
            except Exception as exc:
                failed.append((number, _why(exc)))
                warnings.append(f"{path}: page {number}: text not extracted ({_why(exc)})")
                continue
        text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
        if text.strip():
            out.body(text, (), page=number)
        elif complaints.messages:  # e.g. a content stream pypdf could not decompress
            failed.append((number, complaints.messages[0][:200]))
            warnings.append(f"{path}: page {number}: text not extracted ({complaints.messages[0][:200]})")
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
    title = meta_title or first_line_title(out.sections[0].text) or file_title(path)
    return Document(path, title, "pdf", tuple(out.sections), out.text, tuple(warnings))
