"""Compare (SPEC F15): one question asked three ways, and why each passage came up.

:func:`compare` runs the hybrid statement once, with every candidate of both
legs returned: the dense leg gives each passage its rank by meaning, the
keyword leg its rank by words, and the first ``top_k`` of the fused order (then
reranked, when the base has a reranker) are the hybrid answer. Legs keep
``leg_limit(top_k)`` rows exactly as in a search with the same ``top_k``, so the
ranks shown are those ``mode="dense"`` and ``mode="keyword"`` searches return,
and the hybrid column is the order ``mode="hybrid"`` returns. Bases of
different embedding models or BM25/RRF parameters (which a single statement
cannot join) are compared by three searches instead. Either way it runs the
search pipeline of :mod:`metis_pg.search`: the same reranking, memory order
and warnings as a search.

Why a passage came up:

- among the ``top_k`` closest in meaning and sharing words: "close in meaning
  (#2) and shares words (#1)" (both agree);
- sharing words but not among the ``top_k`` closest in meaning: "shares words
  (#1); not among the closest in meaning (#23)" (it names a term of the question
  exactly); the same rule for words: a keyword rank beyond ``top_k`` is "not among
  the best by words (#21)";
- close in meaning without a word of the question: "close in meaning (#1); its
  words do not match" (it says the same thing in other words), or "…; shares
  few of its words" when it has a term of the question but too few to rank by words;
- when reranked: "… · the reranker scored it 0.97".
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import storage
from .filters import Filters
from .chunking import embedding_text
from .errors import EmbeddingModelUnavailable
from .results import Citation, SearchResponse, SearchWarning
from .search import SearchRequest, statement_key
from .search_answer import citation, to_response
from .tokenizer import query_terms, terms

if TYPE_CHECKING:
    from .api import Metis

__all__ = ["ComparedPassage", "CompareResult", "compare", "why"]

AGREEMENTS = ("both", "words", "meaning")


@dataclass(frozen=True, slots=True)
class ComparedPassage:
    """A passage some mode found, with its rank in each mode (None: that mode did not return it).

    Attributes:
        hybrid_rank: rank in the hybrid answer (after the reranker when it ran), 1-based.
        dense_rank: rank by meaning (the dense leg = ``mode="dense"``).
        keyword_rank: rank by words (the BM25 leg = ``mode="keyword"``).
        dense, keyword, fused, rerank: the scores behind those ranks.
        agreement: ``both``, ``words`` or ``meaning``: which legs found it.
        why: the sentence explaining it.
    """

    chunk_id: int
    base: str
    citation: Citation
    text: str
    hybrid_rank: int | None
    dense_rank: int | None
    keyword_rank: int | None
    dense: float | None
    keyword: float | None
    fused: float | None
    rerank: float | None
    agreement: str
    why: str

    def to_dict(self) -> dict[str, Any]:
        scores = {k: v for k, v in (("dense", self.dense), ("keyword", self.keyword), ("fused", self.fused),
                                    ("rerank", self.rerank)) if v is not None}
        return {
            "chunk_id": self.chunk_id,
            "base": self.base,
            "citation": self.citation.to_dict(),
            "text": self.text,
            "ranks": {"hybrid": self.hybrid_rank, "dense": self.dense_rank, "keyword": self.keyword_rank},
            "scores": scores,
            "agreement": self.agreement,
            "why": self.why,
        }


@dataclass(frozen=True, slots=True)
class CompareResult:
    """The comparison of one question: every passage any mode found, hybrid answer first.

    ``took`` is ms per step: ``embed``, ``search`` (the statement), ``rerank``, ``total``.
    ``fusion`` is what fused the legs, as ``SearchResponse.fusion``.
    """

    question: str
    bases: tuple[str, ...]
    top_k: int
    reranked: bool
    passages: tuple[ComparedPassage, ...]
    warnings: tuple[SearchWarning, ...]
    took: dict[str, float]
    fusion: dict[str, Any] = dataclasses.field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """Return how many passages each mode returned (``hybrid``, ``dense``, ``keyword``)."""
        return {
            "hybrid": sum(1 for p in self.passages if p.hybrid_rank is not None),
            "dense": sum(1 for p in self.passages if p.dense_rank is not None and p.dense_rank <= self.top_k),
            "keyword": sum(1 for p in self.passages if p.keyword_rank is not None and p.keyword_rank <= self.top_k),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "bases": list(self.bases),
            "top_k": self.top_k,
            "reranked": self.reranked,
            "fusion": self.fusion,
            "counts": self.counts(),
            "passages": [p.to_dict() for p in self.passages],
            "warnings": [w.to_dict() for w in self.warnings],
            "took": {k: round(v, 3) for k, v in self.took.items()},
        }


def why(dense_rank: int | None, keyword_rank: int | None, top_k: int, rerank: float | None = None,
        *, shares_terms: bool = False) -> tuple[str, str]:
    """Return ``(agreement, sentence)`` for a passage's ranks by meaning and by words.

    One rule for both legs: "close in meaning" is a dense rank within `top_k` (what
    ``mode="dense"`` returns), "shares words" a keyword rank within `top_k` (what
    ``mode="keyword"`` returns); a rank beyond it is named as such ("not among the best by
    words (#21)"), never as a match.
    """
    close = dense_rank is not None and dense_rank <= top_k
    wordy = keyword_rank is not None and keyword_rank <= top_k
    far_meaning = "not among the closest in meaning" + (f" (#{dense_rank})" if dense_rank is not None else "")
    if close and wordy:
        agreement, text = "both", f"close in meaning (#{dense_rank}) and shares words (#{keyword_rank})"
    elif wordy:
        agreement, text = "words", f"shares words (#{keyword_rank}); {far_meaning}"
    elif close:
        tail = (f"not among the best by words (#{keyword_rank})" if keyword_rank is not None
                else "shares few of its words" if shares_terms else "its words do not match")
        agreement, text = "meaning", f"close in meaning (#{dense_rank}); {tail}"
    elif dense_rank is not None or keyword_rank is not None:
        ranks = [f"meaning #{dense_rank}" if dense_rank is not None else "",
                 f"words #{keyword_rank}" if keyword_rank is not None else ""]
        agreement = "both" if dense_rank is not None and keyword_rank is not None else (
            "meaning" if dense_rank is not None else "words")
        text = f"found by the fused order ({', '.join(r for r in ranks if r)}: neither among the first {top_k})"
    else:
        agreement, text = "both", "found by the fused order"
    if rerank is not None:
        text += f" · the reranker scored it {rerank:.2f}"
    return agreement, text


def compare(metis: "Metis", bases: str | Sequence[str], question: str, *, top_k: int = 10,
            rerank: bool | None = None, filters: dict[str, Any] | Filters | None = None,
            fusion: dict[str, Any] | None = None) -> CompareResult:
    """Ask `question` in the hybrid, dense and keyword modes; return every passage found, explained.

    Runs the search pipeline once in hybrid mode with every candidate of both legs
    kept (the same statement, reranker, memory order and warnings as a search);
    bases that one statement cannot search together are compared by three searches.

    `fusion` overrides the bases' rrf_k and leg weights as in a search (the same fused order).

    Raises:
        InvalidInput: empty or too long question, top_k out of range, bad filter, bad fusion override.
        BaseNotFound: a base does not exist.
    """
    started = time.perf_counter()
    request = SearchRequest.build(bases, question, top_k=top_k, rerank=rerank, filters=filters, fusion=fusion)
    with metis.pool.connection() as conn:
        rows = [storage.get_base(conn, n) for n in request.bases]
    if len({statement_key(request.spec_for(r.base_spec)) for r in rows}) > 1:
        return _compare_by_searches(metis, request, started)

    ranked = metis.pipeline().run(request, every_candidate=True)
    found = ranked.candidates
    hybrid_rank = {c.chunk_id: i for i, c in enumerate(found[:top_k], start=1)}
    shown = [c for c in found if c.chunk_id in hybrid_rank
             or (c.dense_rank is not None and c.dense_rank <= top_k)
             or (c.keyword_rank is not None and c.keyword_rank <= top_k)]
    shown.sort(key=lambda c: (hybrid_rank.get(c.chunk_id, top_k + 1),
                              min(c.dense_rank or 10**9, c.keyword_rank or 10**9), c.chunk_id))
    question_terms = query_terms(question)
    wanted = set(question_terms)
    passages = []
    for c in shown:
        shares = bool(wanted.intersection(terms(embedding_text(c.title, c.headings, c.text))))
        rerank_score = ranked.rerank_scores.get(c.chunk_id)
        agreement, sentence = why(c.dense_rank, c.keyword_rank, top_k, rerank_score, shares_terms=shares)
        passages.append(ComparedPassage(
            chunk_id=c.chunk_id, base=c.base, text=c.text,
            citation=citation(c, question_terms, ranked.weighing.get(c.base, frozenset())),
            hybrid_rank=hybrid_rank.get(c.chunk_id), dense_rank=c.dense_rank, keyword_rank=c.keyword_rank,
            dense=c.dense, keyword=c.keyword, fused=c.fused, rerank=rerank_score,
            agreement=agreement, why=sentence,
        ))
    took = {"embed": ranked.took.embed, "search": ranked.took.dense + ranked.took.keyword + ranked.took.fuse,
            "rerank": ranked.took.rerank, "total": (time.perf_counter() - started) * 1000}
    return CompareResult(question=question, bases=request.bases, top_k=top_k, reranked=ranked.reranked,
                         passages=tuple(passages), warnings=tuple(ranked.warnings), took=took,
                         fusion=ranked.fusion)


def _compare_by_searches(metis: "Metis", request: SearchRequest, started: float) -> CompareResult:
    """Bases of several embedding models: three searches; ranks are positions in each answer."""
    top_k = request.top_k
    answers: dict[str, SearchResponse] = {}
    warnings: list[SearchWarning] = []
    pipeline = metis.pipeline()
    for mode in ("hybrid", "dense", "keyword"):
        asked = dataclasses.replace(request, mode=mode, rerank=request.rerank if mode == "hybrid" else False)
        try:
            # One count for the comparison (as its hybrid search), not three.
            answers[mode] = to_response(pipeline.run(asked, count=mode == "hybrid"))
        except EmbeddingModelUnavailable as exc:
            warnings.append(SearchWarning("KEYWORD_ONLY", f"{exc.message}: no dense results"))
            continue
        warnings.extend(w for w in answers[mode].warnings if w not in warnings)
    ranks: dict[int, dict[str, int]] = {}
    results = {}
    for mode, answer in answers.items():
        for i, r in enumerate(answer.results, start=1):
            ranks.setdefault(r.chunk_id, {})[mode] = i
            results.setdefault(r.chunk_id, r)
    wanted = set(query_terms(request.question))
    passages = []
    order = sorted(ranks, key=lambda cid: (ranks[cid].get("hybrid", top_k + 1),
                                           min(ranks[cid].get("dense", 10**9), ranks[cid].get("keyword", 10**9)), cid))
    for cid in order:
        r, rk = results[cid], ranks[cid]
        shares = bool(wanted.intersection(terms(r.text)))
        agreement, sentence = why(rk.get("dense"), rk.get("keyword"), top_k, r.scores.rerank, shares_terms=shares)
        passages.append(ComparedPassage(
            chunk_id=cid, base=r.base, citation=r.citation, text=r.text, hybrid_rank=rk.get("hybrid"),
            dense_rank=rk.get("dense"), keyword_rank=rk.get("keyword"), dense=r.scores.dense,
            keyword=r.scores.keyword, fused=r.scores.fused, rerank=r.scores.rerank, agreement=agreement, why=sentence,
        ))
    took = {"embed": sum(a.took.embed for a in answers.values()),
            "search": sum(a.took.dense + a.took.keyword + a.took.fuse for a in answers.values()),
            "rerank": sum(a.took.rerank for a in answers.values()),
            "total": (time.perf_counter() - started) * 1000}
    hybrid = answers.get("hybrid")
    fusion = next((a.fusion for a in answers.values()), {})
    return CompareResult(question=request.question, bases=request.bases, top_k=top_k,
                         reranked=bool(hybrid and hybrid.reranked), passages=tuple(passages),
                         warnings=tuple(warnings), took=took, fusion=fusion)
