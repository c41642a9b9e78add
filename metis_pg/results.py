"""Typed results: what a search returns (what an indexing run, a base listing, notes and facts return:
:mod:`metis_pg.reports`, re-exported here).

All are frozen dataclasses; ``to_dict()`` gives exactly the JSON of SPEC F13
(the same as ``metis search --json`` and the HTTP service). Keys whose step did
not find or score a result are absent from ``scores``; ``citation`` has
``page`` (PDF) or ``line`` (text, Markdown, HTML), never both: the page or line of
the snippet's sentence, with the passage's range (``page_start``/``page_end`` or
``line_start``/``line_end``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

__all__ = [
    "Citation",
    "Scores",
    "Took",
    "SearchWarning",
    "SearchResult",
    "SearchResponse",
    "IndexReport",
    "FailedDocument",
    "BaseInfo",
    "Note",
    "Fact",
    "ReembedReport",
]

#: Names of :mod:`metis_pg.reports`, found here too (imported at first use: a search needs none of them,
#: and each frozen dataclass costs ~0.5 ms of CPU to make; ``metis search``'s start-up, issue 25).
_REPORTS = frozenset({"IndexReport", "FailedDocument", "BaseInfo", "Note", "Fact", "ReembedReport"})


def __getattr__(name: str) -> Any:
    if name in _REPORTS:
        from . import reports

        return getattr(reports, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True, slots=True)
class Citation:
    """Where a passage comes from.

    Attributes:
        source: the source (drive) name; a base's notes are ``metis-<base>``.
        document: the document's path, relative to its source's folder.
        title: the document's title.
        kind: ``md``, ``txt``, ``html``, ``pdf`` or ``docx``.
        page: 1-based PDF page of the snippet's sentence, else None.
        line: 1-based line of the file where the snippet's sentence starts (md, txt, html),
            else None (never with ``page``).
        headings: heading path above the passage, outermost first.
        snippet: at most 240 characters around the sentence holding most of the question's words.
        line_start, line_end: the lines the whole passage spans (with ``line``), else None.
        page_start, page_end: the PDF pages the whole passage spans (with ``page``), else None.
        tags: the document's tags (lower case); author: its author, else None; date: its own
            date, else its file's modification time, else None (issue 21).
        page_label: the printed label of `page` when the PDF has page labels and it is not the page's
            number (page 19 printed "16"), else None.
        marks: the spans of `snippet` to mark, ``(start, end)`` in characters (code points, end
            excluded): the question's words that weigh in the base (:func:`metis_pg.snippets.marks`).
        column: 1-based column (characters) of the snippet's sentence in `line`, when the passage
            starts inside that line after another passage of it (a line longer than a chunk: md,
            txt), else None; the citation is then ``document:line:column``.
    """

    source: str
    document: str
    title: str
    kind: str
    page: int | None
    line: int | None
    headings: tuple[str, ...]
    snippet: str
    line_start: int | None = None
    line_end: int | None = None
    page_start: int | None = None
    page_end: int | None = None
    tags: tuple[str, ...] = ()
    author: str | None = None
    date: datetime | None = None
    marks: tuple[tuple[int, int], ...] = ()
    page_label: str | None = None
    column: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "source": self.source,
            "document": self.document,
            "title": self.title,
            "kind": self.kind,
            "tags": list(self.tags),
            "author": self.author,
            "date": self.date.isoformat() if self.date is not None else None,
        }
        if self.page is not None:
            data["page"] = self.page
            data["page_start"] = self.page if self.page_start is None else self.page_start
            data["page_end"] = self.page if self.page_end is None else self.page_end
            if self.page_label is not None:
                data["page_label"] = self.page_label
        elif self.line is not None:
            data["line"] = self.line
            if self.column is not None:
                data["column"] = self.column
            data["line_start"] = self.line if self.line_start is None else self.line_start
            data["line_end"] = self.line if self.line_end is None else self.line_end
        data["headings"] = list(self.headings)
        data["snippet"] = self.snippet
        data["marks"] = [[a, b] for a, b in self.marks]
        return data

    def location(self) -> str:
        """Return ``document:line`` (``document:line:column`` inside a line cut between passages),
        ``document p.N`` (``document p.19 (printed 16)`` when the page prints another label) or the
        document alone (the cited line or page)."""
        if self.page is not None:
            printed = f" (printed {self.page_label})" if self.page_label is not None else ""
            return f"{self.document} p.{self.page}{printed}"
        if self.line is not None and self.column is not None:
            return f"{self.document}:{self.line}:{self.column}"
        if self.line is not None:
            return f"{self.document}:{self.line}"
        return self.document


@dataclass(frozen=True, slots=True)
class Scores:
    """The score of a result at every step (None: the step did not find or score it).

    ``dense`` is cosine similarity (1 - pgvector ``<=>``), ``keyword`` the BM25
    score, ``fused`` the RRF score, ``rerank`` the reranker's score. Ranks are 1-based.
    """

    dense: float | None = None
    dense_rank: int | None = None
    keyword: float | None = None
    keyword_rank: int | None = None
    fused: float | None = None
    rerank: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__ if getattr(self, k) is not None}

    def line(self) -> str:
        """Return the console line: ``meaning 0.830 (#1) · words 7.41 (#2) · fused 0.0328 · reranker 0.970``.

        Numbers are rounded as JavaScript's ``toFixed`` does (the console writes the same line):
        half away from zero on the exact value, so 2 / 64 = 0.03125 is ``0.0313`` here too.
        """
        parts = []
        # A leg's rank only when it kept the passage (complete scores: a score without a rank).
        if self.dense is not None:
            parts.append(f"meaning {_fixed(self.dense, 3)}" + (f" (#{self.dense_rank})" if self.dense_rank else ""))
        if self.keyword is not None:
            parts.append(f"words {_fixed(self.keyword, 2)}" + (f" (#{self.keyword_rank})" if self.keyword_rank else ""))
        if self.fused is not None:
            parts.append(f"fused {_fixed(self.fused, 4)}")
        if self.rerank is not None:
            parts.append(f"reranker {_fixed(self.rerank, 3)}")
        return " · ".join(parts)


def _fixed(value: float, digits: int) -> str:
    """`value` with `digits` decimals, half away from zero on its exact binary value (JS ``toFixed``)."""
    return str(Decimal(value).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


@dataclass(frozen=True, slots=True)
class Took:
    """Milliseconds each step of a search took (0.0: the step did not run)."""

    embed: float = 0.0
    dense: float = 0.0
    keyword: float = 0.0
    fuse: float = 0.0
    rerank: float = 0.0
    total: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return {k: round(getattr(self, k), 3) for k in self.__slots__}


@dataclass(frozen=True, slots=True)
class SearchWarning:
    """Something a search could not do (SPEC F14); the search still answered.

    Codes: ``KEYWORD_ONLY``, ``FUSED_ORDER``, ``NO_VECTOR_YET``, ``NOTHING_INDEXED``,
    ``NO_READABLE_DOCUMENT``, ``UNKNOWN_SOURCE``, ``FILTERS_MATCH_NOTHING``, ``NO_WORDS`` (the question holds no letter or digit),
    ``PHRASE_NOT_FOUND`` (no chunk holds the question's quoted phrase),
    ``TOKENIZER_CHANGED``, ``REPLICA_SKIPPED`` (a read replica was down or lagging: another server
    answered), ``READ_FROM_PRIMARY`` (no replica could serve: the primary answered).
    """

    code: str
    message: str

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One passage of an answer.

    Attributes:
        score: the reranker's score when reranked, else the fused score (the order).
        text: the whole chunk.
        base: the base it comes from.
        citation: where it comes from.
        scores: its score at every step.
        chunk_id: its id in the database (``chunks.chunk_id``).
        holds: for a fact of a memory base, whether it still holds; None otherwise.
        passages: in a search per document, how many passages of its document matched (this
            one, its best, included); None otherwise (:mod:`metis_pg.per_document`).
    """

    score: float
    text: str
    base: str
    citation: Citation
    scores: Scores
    chunk_id: int
    holds: bool | None = None
    passages: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "score": self.score,
            "text": self.text,
            "base": self.base,
            "citation": self.citation.to_dict(),
            "scores": self.scores.to_dict(),
            "chunk_id": self.chunk_id,
        }
        if self.holds is not None:
            data["holds"] = self.holds
        if self.passages is not None:
            data["passages"] = self.passages
        return data


@dataclass(frozen=True, slots=True)
class SearchResponse:
    """The answer to a search (SPEC F13): results best first, and how it went.

    ``fusion`` is what fused the legs: ``{"rrf_k", "dense_weight", "keyword_weight"}`` when
    every base searched used the same (the bases' spec, or the search's override), else
    ``{"per_base": {base: {"rrf_k", "dense_weight", "keyword_weight"}}}``. ``per_document``: each
    document once, at its best passage (:mod:`metis_pg.per_document`).
    """

    mode: str
    reranked: bool
    results: tuple[SearchResult, ...]
    warnings: tuple[SearchWarning, ...]
    took: Took
    bases: tuple[str, ...] = ()
    fusion: dict[str, Any] = field(default_factory=dict)
    per_document: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Return the SPEC F13 JSON (what ``metis search --json`` prints); ``per_document: true`` when so."""
        data = {
            "mode": self.mode,
            "reranked": self.reranked,
            "bases": list(self.bases),
            "fusion": self.fusion,
            "results": [r.to_dict() for r in self.results],
            "warnings": [w.to_dict() for w in self.warnings],
            "took": self.took.to_dict(),
        }
        if self.per_document:
            data["per_document"] = True
        return data
