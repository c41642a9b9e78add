"""Compare (SPEC F15): one question asked three ways, and why each passage came up.

:func:`compare` runs the hybrid statement once, with every candidate of both
legs returned: the dense leg gives each passage its rank by meaning, the
keyword leg its rank by words, and the first ``top_k`` of the fused order (then
reranked, when the base has a reranker) are the hybrid answer. Legs keep
``leg_limit(top_k)`` rows exactly as in a search with the same ``top_k``, so the
ranks shown are those ``mode="dense"`` and ``mode="keyword"`` searches return,
and the hybrid column is the order ``mode="hybrid"`` returns. Bases of
different embedding models (which a single statement cannot join) are
compared by three searches instead.

Why a passage came up:

- among the ``top_k`` closest in meaning and sharing words: "close in meaning
  (#2) and shares words (#1)" (both agree);
- sharing words but not among the ``top_k`` closest in meaning: "shares words
  (#1); not among the closest in meaning (#23)" (it names a term of the question
  exactly);
- close in meaning without a word of the question: "close in meaning (#1); its
  words do not match" (it says the same thing in other words), or "…; shares
  few of its words" when it has a term of the question but too few to rank by words;
- when reranked: "… · the reranker scored it 0.97".
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import retrieval, storage
from .chunking import embedding_text
from .config import BaseSpec
from .errors import EmbeddingModelUnavailable, RerankerUnavailable
from .results import Citation, SearchResponse, SearchWarning
from .snippets import snippet
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
    """

    question: str
    bases: tuple[str, ...]
    top_k: int
    reranked: bool
    passages: tuple[ComparedPassage, ...]
    warnings: tuple[SearchWarning, ...]
    took: dict[str, float]

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
            "counts": self.counts(),
            "passages": [p.to_dict() for p in self.passages],
            "warnings": [w.to_dict() for w in self.warnings],
            "took": {k: round(v, 3) for k, v in self.took.items()},
        }


def why(dense_rank: int | None, keyword_rank: int | None, top_k: int, rerank: float | None = None,
        *, shares_terms: bool = False) -> tuple[str, str]:
    """Return ``(agreement, sentence)`` for a passage's ranks by meaning and by words.

    "Close in meaning" is a dense rank within `top_k` (what ``mode="dense"``
    returns); "shares words" is any keyword rank (the BM25 leg holds only
    passages with a term of the question).
    """
    close = dense_rank is not None and dense_rank <= top_k
    if keyword_rank is not None and close:
        agreement, text = "both", f"close in meaning (#{dense_rank}) and shares words (#{keyword_rank})"
    elif keyword_rank is not None:
        further = f" (#{dense_rank})" if dense_rank is not None else ""
        agreement, text = "words", f"shares words (#{keyword_rank}); not among the closest in meaning{further}"
    elif dense_rank is not None:
        tail = "shares few of its words" if shares_terms else "its words do not match"
        agreement, text = "meaning", f"close in meaning (#{dense_rank}); {tail}"
    else:
        agreement, text = "both", "found by the fused order"
    if rerank is not None:
        text += f" · the reranker scored it {rerank:.2f}"
    return agreement, text


def compare(metis: "Metis", bases: str | Sequence[str], question: str, *, top_k: int = 10,
            rerank: bool | None = None, filters: dict[str, Any] | retrieval.Filters | None = None) -> CompareResult:
    """Ask `question` in the hybrid, dense and keyword modes; return every passage found, explained.

    Raises:
        InvalidInput: empty or too long question, top_k out of range, bad filter.
        BaseNotFound: a base does not exist.
    """
    started = time.perf_counter()
    from .api import check_request

    names = [bases] if isinstance(bases, str) else list(dict.fromkeys(bases))
    check_request(names, question, top_k)
    if not isinstance(filters, retrieval.Filters):
        filters = retrieval.Filters.from_mapping(filters)
    with metis.pool.connection() as conn:
        rows = [storage.get_base(conn, n) for n in names]
    specs = [BaseSpec.from_json(r.spec) for r in rows]
    if len({s.fingerprint for s in specs}) > 1:
        return _compare_by_searches(metis, names, question, top_k, rerank, filters, started)

    spec = specs[0]
    warnings: list[SearchWarning] = []
    t0 = time.perf_counter()
    vector = None
    try:
        vector = metis.embedder(spec).embed_queries([question])[0]
    except EmbeddingModelUnavailable as exc:
        warnings.append(SearchWarning("KEYWORD_ONLY", f"{exc.message}: results by keywords only"))
    embed_ms = (time.perf_counter() - t0) * 1000
    question_terms = query_terms(question)
    # Both legs whole: at most 2 x leg_limit rows, so every candidate of either leg comes back.
    everything = 2 * retrieval.leg_limit(top_k)
    t0 = time.perf_counter()
    with metis.pool.connection() as conn:
        found, _ = retrieval.run_search(
            conn, base_ids=[r.base_id for r in rows], model=spec.fingerprint, query_embedding=vector,
            terms=question_terms, top_k=everything, legs_top_k=top_k, filters=filters,
            k1=spec.k1, b=spec.b, rrf_k=spec.rrf_k,
        )
    search_ms = (time.perf_counter() - t0) * 1000

    reranker_spec = next((s for s in specs if s.reranker_model), None)
    hybrid = list(found)
    rerank_scores: dict[int, float] = {}
    reranked = False
    rerank_ms = 0.0
    if rerank is not False and reranker_spec is not None and hybrid:
        from .api import rerank_candidates

        shortlist = hybrid[: rerank_candidates(top_k)]
        t0 = time.perf_counter()
        try:
            scores = metis.reranker(reranker_spec).rerank(
                question, [embedding_text(c.title, c.headings, c.text) for c in shortlist]
            )
            rerank_scores = {c.chunk_id: float(s) for c, s in zip(shortlist, scores)}
            hybrid = sorted(shortlist, key=lambda c: (-rerank_scores[c.chunk_id], -c.fused, c.chunk_id))
            reranked = True
        except RerankerUnavailable as exc:
            warnings.append(SearchWarning("FUSED_ORDER", f"{exc.message}: results in the fused order"))
        rerank_ms = (time.perf_counter() - t0) * 1000
    hybrid_rank = {c.chunk_id: i for i, c in enumerate(hybrid[:top_k], start=1)}

    shown = [c for c in found if c.chunk_id in hybrid_rank
             or (c.dense_rank is not None and c.dense_rank <= top_k)
             or (c.keyword_rank is not None and c.keyword_rank <= top_k)]
    shown.sort(key=lambda c: (hybrid_rank.get(c.chunk_id, top_k + 1),
                              min(c.dense_rank or 10**9, c.keyword_rank or 10**9), c.chunk_id))
    wanted = set(question_terms)
    passages = []
    for c in shown:
        shares = bool(wanted.intersection(terms(embedding_text(c.title, c.headings, c.text))))
        agreement, sentence = why(c.dense_rank, c.keyword_rank, top_k, rerank_scores.get(c.chunk_id), shares_terms=shares)
        citation = Citation(
            source=c.source, document=c.document, title=c.title, kind=c.kind, page=c.page,
            line=None if c.page is not None else c.line, headings=c.headings, snippet=snippet(c.text, wanted),
        )
        passages.append(ComparedPassage(
            chunk_id=c.chunk_id, base=c.base, citation=citation, text=c.text,
            hybrid_rank=hybrid_rank.get(c.chunk_id), dense_rank=c.dense_rank, keyword_rank=c.keyword_rank,
            dense=c.dense, keyword=c.keyword, fused=c.fused, rerank=rerank_scores.get(c.chunk_id),
            agreement=agreement, why=sentence,
        ))
    took = {"embed": embed_ms, "search": search_ms, "rerank": rerank_ms,
            "total": (time.perf_counter() - started) * 1000}
    return CompareResult(question=question, bases=tuple(names), top_k=top_k, reranked=reranked,
                         passages=tuple(passages), warnings=tuple(warnings), took=took)


def _compare_by_searches(metis: "Metis", names: list[str], question: str, top_k: int,
                         rerank: bool | None, filters: retrieval.Filters, started: float) -> CompareResult:
    """Bases of several embedding models: three searches; ranks are positions in each answer."""
    answers: dict[str, SearchResponse] = {}
    warnings: list[SearchWarning] = []
    for mode in ("hybrid", "dense", "keyword"):
        try:
            answers[mode] = metis.search(names, question, mode=mode, top_k=top_k,
                                         rerank=rerank if mode == "hybrid" else False, filters=filters)
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
    wanted = set(query_terms(question))
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
    return CompareResult(question=question, bases=tuple(names), top_k=top_k,
                         reranked=bool(hybrid and hybrid.reranked), passages=tuple(passages),
                         warnings=tuple(warnings), took=took)
