"""Output formats of ``metis search`` and ``metis ls`` (issue 15), and the ``--min-score`` cut.

=========  ==================================================================================
``json``   the SPEC F13 answer (search), a list of documents (ls): one JSON document
``jsonl``  one JSON object per line: a result with its ``rank`` (search), a document (ls)
``csv``    a header row, then one row per result or document (RFC 4180, ``\\r\\n`` rows)
``md``     a Markdown list of cited passages an agent can paste (search), of documents (ls)
``files``  document paths only, one per line, each once, best first (search) or by path (ls)
=========  ==================================================================================

The MCP server (:mod:`metis_pg.mcp_server`) uses :func:`cut_below` and :func:`markdown` too.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .results import SearchResponse, SearchResult

if TYPE_CHECKING:  # pragma: no cover
    from .documents import DocumentInfo

__all__ = ["FORMATS", "order_score", "cut_below", "search_output", "documents_output", "markdown", "result_label",
           "text_marks"]

#: Every format but the people's default (``text``).
FORMATS = ("json", "jsonl", "csv", "md", "files")

SEARCH_COLUMNS = ("rank", "base", "source", "document", "line", "line_start", "line_end", "page", "page_start",
                  "page_end", "title", "headings", "score",
                  "dense", "dense_rank", "keyword", "keyword_rank", "fused", "rerank", "chunk_id", "snippet")
DOCUMENT_COLUMNS = ("source", "document", "title", "kind", "chunks", "size_bytes", "indexed_at", "tags", "author",
                    "category", "date")


def order_score(answer: SearchResponse, result: SearchResult) -> float | None:
    """Return the score that orders `result` in `answer`, the one ``--min-score`` compares.

    The reranker's score when the answer is reranked; else the fused RRF score in mode
    ``hybrid``, the cosine similarity (-1 to 1) in mode ``dense``, the BM25 score in mode
    ``keyword``. None when the result has no such score (a fact past the reranked head).
    """
    s = result.scores
    if answer.reranked and s.rerank is not None:
        return s.rerank
    return {"hybrid": s.fused, "dense": s.dense, "keyword": s.keyword}.get(answer.mode, s.fused)


def cut_below(answer: SearchResponse, min_score: float | None) -> tuple[SearchResponse, int]:
    """Return `answer` without the results whose :func:`order_score` is below `min_score`, and how many went.

    None keeps every result.
    """
    if min_score is None:
        return answer, 0
    kept = tuple(r for r in answer.results if (order_score(answer, r) or 0.0) >= min_score)
    return dataclasses.replace(answer, results=kept), len(answer.results) - len(kept)


def _csv(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def _files(paths: Sequence[str]) -> str:
    return "".join(f"{p}\n" for p in dict.fromkeys(paths))


def result_label(answer: SearchResponse, r: SearchResult) -> tuple[str, str]:
    """Return what names a result beside its location: ``"<base> · "`` when the answer searched
    several bases (else ``""``), and its heading path joined by ``" > "`` (else the document's title)."""
    c = r.citation
    return (f"{r.base} · " if len(answer.bases) > 1 else ""), (" > ".join(c.headings) if c.headings else c.title)


def text_marks(r: SearchResult) -> tuple[tuple[int, int], ...]:
    """Return the spans of the result's whole `text` to mark: the words its snippet marks (``Citation.marks``: the
    question's words that weigh in the base, never "how", "for", "the" in a base where every passage has them)
    wherever the text holds them, as ``(start, end)`` character offsets (:func:`metis_pg.snippets.marks`)."""
    from .snippets import marks
    from .tokenizer import terms

    c = r.citation
    return marks(r.text, {t for a, b in c.marks for t in terms(c.snippet[a:b])})


def _bold(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """Return `text` with each of `spans` in Markdown bold (``**word**``)."""
    out, at = [], 0
    for start, end in spans:
        out += [text[at:start], "**", text[start:end], "**"]
        at = end
    return "".join(out) + text[at:]


def markdown(answer: SearchResponse) -> str:
    """Return the answer as a Markdown list of cited passages: citation, headings, score, then the passage quoted,
    the words that weigh in bold (:func:`text_marks`)."""
    lines = []
    for rank, r in enumerate(answer.results, start=1):
        c = r.citation
        where, heading = result_label(answer, r)
        more = "" if r.passages is None else f", {r.passages} passage{'' if r.passages == 1 else 's'} matched"
        lines.append(f"{rank}. **{where}{c.location()}** — {heading} (score {r.score:.4g}{more})")
        lines.extend(f"   > {line}".rstrip() for line in _bold(r.text, text_marks(r)).splitlines() or [""])
        lines.append("")
    if not lines:  # an empty answer is said, as in the text output (a paste shows why nothing came)
        return "_no results_\n"
    return "\n".join(lines)


def search_output(answer: SearchResponse, fmt: str) -> str:
    """Return `answer` written in `fmt` (one of :data:`FORMATS`), ending with a newline when not empty."""
    if fmt == "json":
        return json.dumps(answer.to_dict(), ensure_ascii=False, indent=2) + "\n"
    if fmt == "jsonl":
        return "".join(json.dumps({"rank": i, **r.to_dict()}, ensure_ascii=False) + "\n"
                       for i, r in enumerate(answer.results, start=1))
    if fmt == "files":
        return _files([r.citation.document for r in answer.results])
    if fmt == "md":
        return markdown(answer)
    if fmt == "csv":
        rows = []
        for i, r in enumerate(answer.results, start=1):
            c, s = r.citation, r.scores
            rows.append([i, r.base, c.source, c.document, c.line, c.line_start, c.line_end, c.page, c.page_start,
                         c.page_end, c.title, " > ".join(c.headings), r.score,
                         s.dense, s.dense_rank, s.keyword, s.keyword_rank, s.fused, s.rerank, r.chunk_id, c.snippet])
        return _csv(rows, SEARCH_COLUMNS)
    raise ValueError(f"unknown format {fmt!r}")


def documents_output(found: Sequence["DocumentInfo"], fmt: str) -> str:
    """Return documents (``metis ls``) written in `fmt` (one of :data:`FORMATS`)."""
    if fmt == "json":
        return json.dumps([d.to_dict() for d in found], ensure_ascii=False, indent=2) + "\n"
    if fmt == "jsonl":
        return "".join(json.dumps(d.to_dict(), ensure_ascii=False) + "\n" for d in found)
    if fmt == "files":
        return _files([d.document for d in found])
    if fmt == "md":
        return "".join(f"- `{d.document}` — {d.title} ({d.kind}, {d.chunks} chunks, source {d.source}, "
                       f"indexed {d.indexed_at[:19].replace('T', ' ')})\n" for d in found)
    if fmt == "csv":
        return _csv([[d.source, d.document, d.title, d.kind, d.chunks, d.size_bytes, d.indexed_at, ",".join(d.tags),
                      d.author or "", d.category or "", d.date or ""] for d in found], DOCUMENT_COLUMNS)
    raise ValueError(f"unknown format {fmt!r}")
