"""Plain text (.txt, .text): one section, no headings; paragraphs are cut by the chunker.

The title is the first line when it is short (at most 100 characters), else
the file name. Decoding rules: :mod:`metis_pg.readers._common`.
"""

from __future__ import annotations

import os
from pathlib import Path

from ._common import LineCounter, decode_text, file_title, first_line_title, source_section, unreadable
from .document import Document

__all__ = ["read_text_file", "read"]


def read_text_file(path_or_bytes: str | os.PathLike | bytes) -> str:
    """Return the text of a file (or of its bytes), decoded, with ``"\\n"`` newlines.

    UTF-8 with or without BOM, UTF-16/32 with BOM, else charset-normalizer's
    detection (Latin-1 and other legacy code pages).

    Raises:
        UnreadableDocument: the file cannot be opened, holds NUL bytes (binary)
            or matches no encoding; the message names the file.
    """
    if isinstance(path_or_bytes, (bytes, bytearray)):
        return decode_text(bytes(path_or_bytes), "<bytes>")
    path = os.fspath(path_or_bytes)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise unreadable(path, f"cannot open: {exc.strerror or exc}") from exc
    return decode_text(data, path)


def read(path: str, data: bytes) -> Document:
    """Return the Document of a text file's bytes (one section starting at its first non-blank line).

    Raises:
        UnreadableDocument: binary or undecodable content.
    """
    text = decode_text(data, path)
    section = source_section(text, 0, len(text), (), LineCounter(text))
    title = first_line_title(text) or file_title(path)
    return Document(path, title, "txt", (section,) if section else (), text)
