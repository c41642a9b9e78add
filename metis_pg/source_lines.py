"""The source line of an offset in a section's or a chunk's text (:attr:`metis_pg.readers.Section.line_map`).

A module of its own, importing nothing: a search cites lines (:mod:`metis_pg.search_answer`) without
importing the readers and the chunker, which share it (``metis search``'s start-up, issue 25).
"""

from __future__ import annotations

__all__ = ["line_at"]


def line_at(text: str, line: int | None, line_map: tuple[int, ...], offset: int) -> int | None:
    """Return the source line of ``text[offset]`` (see :attr:`metis_pg.readers.Section.line_map`); None
    when ``line`` is None.

    Args:
        text: a section's or a chunk's text.
        line: the line where ``text`` starts.
        line_map: flattened ``(offset, line)`` pairs, offsets increasing (may be empty).
        offset: characters into ``text``; clamped to ``[0, len(text)]``.
    """
    if line is None:
        return None
    offset = max(0, min(offset, len(text)))
    anchor, at = 0, line
    for i in range(0, len(line_map) - 1, 2):
        if line_map[i] > offset:
            break
        anchor, at = line_map[i], line_map[i + 1]
    return at + text.count("\n", anchor, offset)
