"""The answer of a search (SPEC F13): its results cited and scored, and the fusion it used.

:func:`to_response` turns a :class:`~metis_pg.search.Ranked` run into a
:class:`~metis_pg.results.SearchResponse`; :func:`citation` cites one candidate (also for
:mod:`metis_pg.compare`); :func:`fusion_echo` says which fusion each base used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import fusion as fusion_functions
from .config import FUSION_FIELDS, BaseSpec
from .results import Citation, Scores, SearchResponse, SearchResult
from .retrieval import Candidate
from .snippets import marks, snippet_at
from .source_lines import line_at
from .tokenizer import query_terms

if TYPE_CHECKING:
    from .search import Ranked

__all__ = ["citation", "fusion_echo", "to_response"]


def fusion_echo(specs: dict[str, BaseSpec], plans: dict[str, tuple[fusion_functions.Plan, Any]] | None = None,
                mode: str = "hybrid") -> dict[str, Any]:
    """Return the fusion a search used, for its answer (``SearchResponse.fusion``).

    The parameters of :data:`~metis_pg.config.FUSION_FIELDS` (``fusion``, ``normalization``,
    ``alpha``, ``routing``, ``rrf_k``, ``dense_weight``, ``keyword_weight``) when every base
    searched used the same (the usual case); else ``{"per_base": {base: {...}}}``: each base's
    own, its list merged with the others' by RRF over ranks, each with its own rrf_k
    (:func:`~metis_pg.search.merge_by_rank`). A hybrid search also gets ``route`` (of its first statement, or per
    base): ``dense_share`` (the dense leg's share it fused with: rrf weights ``W * share`` and
    ``W * (1 - share)``, or convex's alpha), ``features`` (the routing features that fired, see
    :mod:`metis_pg.routing`), ``absent_share`` and ``bm25_ratio`` (the statement's figures).
    """
    used = {name: {f: getattr(spec, f) for f in FUSION_FIELDS} for name, spec in specs.items()}
    routes = {name: _route(plan, first) for name, (plan, first) in (plans or {}).items()} if mode == "hybrid" else {}
    distinct = {tuple(u.values()) for u in used.values()}
    if len(distinct) <= 1:
        echo = dict(next(iter(used.values()), {}))
        if routes:
            echo["route"] = next(iter(routes.values()))
        return echo
    for name, route in routes.items():
        used[name]["route"] = route
    return {"per_base": used}


def _route(plan: fusion_functions.Plan, first: Any) -> dict[str, Any]:
    """What routing did for one statement (``answer.fusion.route``)."""
    fired = list(plan.fired)
    share = plan.dense_share
    absent = ratio = None
    if first is not None:
        share = first.share if first.share is not None else share
        absent, ratio = first.absent_share, first.bm25_ratio
        if plan.route_absent and absent:
            fired.append("absent")
        if plan.route_weak and ratio is not None and ratio < plan.weak_ratio:
            fired.append("weak_bm25")
    return {"dense_share": share, "features": fired, "absent_share": absent, "bm25_ratio": ratio}


def citation(c: Candidate, question_terms: Sequence[str], weighing: frozenset[str] = frozenset()) -> Citation:
    """Return the citation of a candidate: its snippet around the question's terms, the line of the
    snippet's sentence (or the PDF page, with its printed label when the PDF has one that is not the
    page's number), and the chunk's range of lines (pages); the snippet's marks are the words of
    `weighing` (the question's terms that weigh in the candidate's base).

    A chunk written before schema revision 0009 has no ``line_end``: its first line is cited. A
    chunk that starts inside a line an earlier chunk holds (``column``) cites the column of the
    snippet's sentence while that sentence is on its first line.
    """
    shown, offset = snippet_at(c.text, question_terms)
    column = None
    if c.page is not None or c.line is None:
        line = line_start = line_end = None
    elif c.line_end is None:
        line = line_start = line_end = c.line
    else:
        line, line_start, line_end = line_at(c.text, c.line, c.line_map, offset), c.line, c.line_end
        if c.column is not None and "\n" not in c.text[:offset]:
            column = c.column + offset
    return Citation(
        source=c.source, document=c.document, title=c.title, kind=c.kind, page=c.page,
        line=line, headings=c.headings, snippet=shown, line_start=line_start, line_end=line_end,
        page_start=c.page, page_end=c.page, tags=c.tags, author=c.author, date=c.date,
        marks=marks(shown, weighing),
        page_label=c.page_label if c.page is not None and c.page_label != str(c.page) else None,
        column=column,
    )


def to_response(ranked: Ranked) -> SearchResponse:
    """Return the SPEC F13 answer of a pipeline run: its first ``top_k`` candidates, cited and scored."""
    request = ranked.request
    question_terms = query_terms(request.searched)
    results = []
    for c in ranked.candidates[: request.top_k]:
        rerank = ranked.rerank_scores.get(c.chunk_id)
        scores = Scores(dense=c.dense, dense_rank=c.dense_rank, keyword=c.keyword, keyword_rank=c.keyword_rank,
                        fused=c.fused, rerank=rerank)
        results.append(SearchResult(
            score=rerank if ranked.reranked and rerank is not None else c.fused, text=c.text, base=c.base,
            citation=citation(c, question_terms, ranked.weighing.get(c.base, frozenset())), scores=scores,
            chunk_id=c.chunk_id, holds=c.holds,
        ))
    return SearchResponse(mode=request.mode, reranked=ranked.reranked, results=tuple(results),
                          warnings=tuple(ranked.warnings), took=ranked.took, bases=request.bases,
                          fusion=ranked.fusion)
