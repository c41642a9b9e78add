"""Snippets: at most 240 characters of a passage around the sentence that holds
most of the question's words (SPEC F13).

Sentences end at ``. ! ? 。 ！ ？`` followed by space, or at a line break. A
sentence scores the number of distinct question terms it holds (the BM25
tokenizer's terms, so identifiers and accents match as in search); ties go to
the earlier sentence. A sentence longer than the limit is cut around its first
matching term; a shorter one is widened with the text after it (then before).
Cut ends are marked with ``…`` (counted in the 240). :func:`snippet_at` also
says where in the passage the snippet's sentence starts: a citation cites that line.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Collection

from .tokenizer import fold, terms as text_terms

__all__ = ["snippet", "snippet_at", "SNIPPET_MAX_CHARS"]

SNIPPET_MAX_CHARS = 240
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_WORD = re.compile(r"\S+")


def _sentences(text: str) -> list[tuple[int, int]]:
    spans, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        if m.start() > start:
            spans.append((start, m.start()))
        start = m.end()
    if start < len(text):
        spans.append((start, len(text)))
    return spans


def snippet(text: str, question_terms: Collection[str], max_chars: int = SNIPPET_MAX_CHARS) -> str:
    """Return at most `max_chars` characters of `text` around its best sentence.

    Args:
        text: the passage.
        question_terms: the question's terms (``tokenizer.query_terms``), in any order.
        max_chars: the limit, in characters, ellipses included.
    """
    return snippet_at(text, question_terms, max_chars)[0]


def snippet_at(text: str, question_terms: Collection[str], max_chars: int = SNIPPET_MAX_CHARS) -> tuple[str, int]:
    """Return :func:`snippet` and where it points in ``text``: the offset (characters into
    ``text`` as given, before whitespace is collapsed) of the first character of the best
    sentence that the snippet shows (its start, or the snippet's first word when the
    sentence was cut before it). A citation's line is the source line of that offset.
    """
    words = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    collapsed = " ".join(text[a:b] for a, b in words)  # one line: snippets are shown under a heading
    starts, size = [], 0  # offset of each word in `collapsed`
    for a, b in words:
        starts.append(size)
        size += b - a + 1

    def original(offset: int) -> int:
        """The offset in `text` of `collapsed[offset]` (a space: the next word's start)."""
        if not words:
            return 0
        i = bisect_right(starts, offset) - 1
        if i < 0:
            return words[0][0]
        a, b = words[i]
        inside = offset - starts[i]
        if inside >= b - a:
            return words[i + 1][0] if i + 1 < len(words) else b
        return a + inside

    shown, point = _snippet(collapsed, question_terms, max_chars)
    return shown, original(point)


def _snippet(text: str, question_terms: Collection[str], max_chars: int) -> tuple[str, int]:
    """:func:`snippet` of an already collapsed text, and the offset it points at in it."""
    wanted = frozenset(question_terms)
    spans = _sentences(text) or [(0, len(text))]
    best, best_hits = spans[0], -1
    if len(text) > max_chars or len(spans) > 1:
        for span in spans:
            hits = len(wanted.intersection(text_terms(text[span[0]:span[1]])))
            if hits > best_hits:
                best, best_hits = span, hits
    if len(text) <= max_chars:
        return text, best[0]
    start, end = best
    sentence_start = start
    room = max_chars - 2  # two ellipses at most
    if end - start > room:
        # Centre the window on the sentence's first question term.
        # Folded offsets drift a little where folding changes length (ß → ss): fine for a centre.
        # The earliest term wins, whatever order the terms come in: the same snippet in every process.
        lowered = fold(text[start:end])
        found = [at for at in (lowered.find(term) for term in question_terms) if at >= 0]
        anchor = start + min(found) if found else start
        start = max(start, min(anchor - room // 3, end - room))
        end = start + room
    else:
        end = min(len(text), start + room)
        start = max(0, end - room)
    # Move inner cut points to word boundaries when one is near.
    if start > 0:
        space = text.find(" ", start, start + 20)
        if space != -1:
            start = space + 1
    if end < len(text):
        space = text.rfind(" ", end - 20, end)
        if space != -1:
            end = space
    shown = ("…" if start > 0 else "") + text[start:end].strip() + ("…" if end < len(text) else "")
    return shown, max(sentence_start, start)
