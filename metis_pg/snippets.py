"""Snippets: at most 240 characters of a passage around the sentence that holds
most of the question's words (SPEC F13).

Sentences end at ``. ! ? 。 ！ ？`` followed by space, or at a line break. A
sentence scores the number of distinct question terms it holds (the BM25
tokenizer's terms, so identifiers and accents match as in search); ties go to
the earlier sentence. A sentence longer than the limit is cut around its first
matching term; a shorter one is widened with the text after it (then before).
Cut ends are marked with ``…`` (counted in the 240). :func:`snippet_at` also
says where in the passage the snippet's sentence starts: a citation cites that line.

Marks (issue 25): a snippet marks only the question's words that weigh in the base searched
(:func:`weighing_terms`, from BM25's own statistics: no stop list), at the character spans
:func:`marks` gives; "how", "do", "for" of a question are in most passages of a base and are
not marked there.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections.abc import Collection, Mapping

from .tokenizer import fold, terms as text_terms

__all__ = ["snippet", "snippet_at", "SNIPPET_MAX_CHARS", "weighing_terms", "marks", "COMMON_SHARE"]

SNIPPET_MAX_CHARS = 240
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_WORD = re.compile(r"\S+")
#: A run of letters and digits (``_`` is not a letter, as for the tokenizer): what a mark covers.
_RUN = re.compile(r"[^\W_]+")
#: A term held by more than this share of a base's chunks is common there: not marked (unless it is the
#: question's rarest). The keyword leg calls a term common by the same share (sql/search/bm25_top_k.v5.sql).
COMMON_SHARE = 0.1


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


def weighing_terms(document_frequencies: Mapping[str, int], chunk_count: int) -> frozenset[str]:
    """Return the question's terms that weigh in a base: those a snippet marks.

    A term weighs when its BM25 idf, ``ln(1 + (N - df + 0.5) / (df + 0.5))`` (Lucene's, the keyword
    leg's; Robertson & Zaragoza 2009), is at least that of a term held by :data:`COMMON_SHARE` of the
    base's chunks, i.e. when ``df <= 0.1 * N``; the question's rarest terms (lowest df) always weigh, so a
    question of common words alone, or a base too small to tell, still marks its best word(s).

    Args:
        document_frequencies: term -> how many chunks of the base hold it (``bm25_terms.df``); the
            question's terms no chunk holds are absent.
        chunk_count: N, the base's chunks (``bm25_totals.chunk_count``).

    Returns:
        The terms to mark (empty when no question term is in the base).
    """
    if not document_frequencies:
        return frozenset()
    idf = {t: math.log(1 + (chunk_count - df + 0.5) / (df + 0.5)) for t, df in document_frequencies.items()}
    common = COMMON_SHARE * chunk_count
    threshold = math.log(1 + (chunk_count - common + 0.5) / (common + 0.5))
    best = max(idf.values())
    return frozenset(t for t, w in idf.items() if w >= threshold or w >= best)


def marks(text: str, weighing: Collection[str]) -> tuple[tuple[int, int], ...]:
    """Return the spans of `text` (a snippet) to mark: each run of letters and digits one of whose
    tokenizer terms is in `weighing` (:func:`weighing_terms`), as ``(start, end)`` character offsets
    (Unicode code points, end excluded), in text order."""
    if not weighing:
        return ()
    wanted = frozenset(weighing)
    return tuple((m.start(), m.end()) for m in _RUN.finditer(text) if wanted.intersection(text_terms(m.group())))
