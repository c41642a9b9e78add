"""Running an evaluation: every question of a set asked in every mode, scored, summarised."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidInput
from ..results import SearchResponse

from .metrics import Metrics, QueryScore, ranked_units, summarize, _grades, ndcg_at_k, recall_at_k, mrr_at_k
from .sets import QUERY_TYPES, EvalQuery, EvalSet

#: Modes an evaluation can run, with their label on screen.
MODE_LABELS = {
    "hybrid": "hybrid",
    "dense": "dense",
    "keyword": "keyword",
    "hybrid_no_rerank": "hybrid, no rerank",
}

@dataclass(frozen=True, slots=True)
class ModeReport:
    """One mode: overall metrics, by query type, and by group when the set has groups."""

    mode: str
    overall: Metrics
    by_type: dict[str, Metrics] = field(default_factory=dict)
    by_group: dict[str, Metrics] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return MODE_LABELS.get(self.mode, self.mode)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "mode": self.mode, **self.overall.to_dict(),
            "by_type": {t: m.to_dict() for t, m in self.by_type.items()},
        }
        if self.by_group:
            data["by_group"] = {g: m.to_dict() for g, m in self.by_group.items()}
        return data

__all__ = ["MODE_LABELS", "ModeReport", "EvalReport", "run", "CachedQueries", "score_query", "Search", "Progress"]


@dataclass(frozen=True, slots=True)
class EvalReport:
    """An evaluation: the set, the base, the depth searched, and each mode's report.

    ``level`` is ``document`` (document-level judgments, each document counted once)
    or ``passage`` (some judgment names a line or a page).
    """

    eval_set: str
    base: str
    top_k: int
    level: str
    queries: int
    skipped: int
    modes: tuple[ModeReport, ...]
    per_query: tuple[QueryScore, ...] = ()
    seconds: float = 0.0

    def mode(self, name: str) -> ModeReport:
        """Return the report of one mode.

        Raises:
            KeyError: the mode was not run.
        """
        for m in self.modes:
            if m.mode == name:
                return m
        raise KeyError(name)

    def to_dict(self, *, per_query: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {
            "eval_set": self.eval_set, "base": self.base, "top_k": self.top_k, "level": self.level,
            "queries": self.queries, "skipped": self.skipped, "seconds": round(self.seconds, 2),
            "modes": [m.to_dict() for m in self.modes],
        }
        if per_query:
            data["per_query"] = [q.to_dict() for q in self.per_query]
        return data


def score_query(query: EvalQuery, mode: str, answer: SearchResponse, took_ms: float,
                chunk_lines: Mapping[str, Sequence[tuple[int, int]]] | None = None) -> QueryScore:
    """Score one answer to one question."""
    keys = [(r.citation.document, r.chunk_id, r.citation.line, r.citation.page) for r in answer.results]
    units = ranked_units(keys, query.judgments, chunk_lines)
    grades = _grades(query.judgments)
    return QueryScore(
        query_id=query.query_id, query_type=query.type, group=query.group, mode=mode,
        ndcg_at_10=ndcg_at_k(units, grades, 10), recall_at_10=recall_at_k(units, grades, 10),
        recall_at_50=recall_at_k(units, grades, 50), mrr_at_10=mrr_at_k(units, grades, 10),
        results=len(answer.results), took_ms=took_ms, units=tuple(units),
    )


#: Runs one search: (question, mode, top_k, rerank) → answer.
Search = Callable[[str, str, int, bool | None], SearchResponse]
#: Called after each search: (searches done, searches in all).
Progress = Callable[[int, int], None]


def run(
    search: Search,
    eval_set: EvalSet,
    *,
    base: str,
    modes: Sequence[str],
    top_k: int = 50,
    chunk_lines: Mapping[str, Sequence[tuple[int, int]]] | None = None,
    on_progress: Progress | None = None,
) -> EvalReport:
    """Ask every question of `eval_set` in every mode; return the report.

    Each question is asked once per mode with `top_k` passages (at least 50 are
    needed for Recall@50 to see 50 units); the units are ranked as in
    :func:`ranked_units` and scored. Mode ``hybrid_no_rerank`` is hybrid with the
    reranker off.

    Raises:
        InvalidInput: an unknown mode, or a set without questions.
    """
    unknown = [m for m in modes if m not in MODE_LABELS]
    if unknown:
        raise InvalidInput(f"unknown mode {unknown[0]!r}: use {', '.join(MODE_LABELS)}")
    if not eval_set.queries:
        raise InvalidInput(f"the evaluation set {eval_set.name!r} has no question with a relevant judgment")
    started = time.perf_counter()
    total = len(modes) * len(eval_set.queries)
    done = 0
    scores: list[QueryScore] = []
    for query in eval_set.queries:
        for mode in modes:
            search_mode, rerank = ("hybrid", False) if mode == "hybrid_no_rerank" else (mode, None)
            answer = search(query.question, search_mode, top_k, rerank)
            scores.append(score_query(query, mode, answer, answer.took.total, chunk_lines))
            done += 1
            if on_progress is not None:
                on_progress(done, total)
    reports = []
    for mode in modes:
        mine = [s for s in scores if s.mode == mode]
        by_type = {t: summarize([s for s in mine if s.query_type == t]) for t in QUERY_TYPES}
        groups = sorted({s.group for s in mine if s.group is not None})
        by_group = {g: summarize([s for s in mine if s.group == g]) for g in groups}
        reports.append(ModeReport(mode=mode, overall=summarize(mine), by_type=by_type, by_group=by_group))
    return EvalReport(
        eval_set=eval_set.name, base=base, top_k=top_k, level="passage" if eval_set.located else "document",
        queries=len(eval_set.queries), skipped=eval_set.skipped, modes=tuple(reports), per_query=tuple(scores),
        seconds=time.perf_counter() - started,
    )


class CachedQueries:
    """An embedder whose query vectors are computed once, in batches, before an evaluation.

    Questions given to :meth:`prefill` are embedded ``batch_size`` at a time (about
    3x the throughput of one at a time on CPU); later :meth:`embed_queries` calls
    for them return the stored rows. Passages and unknown questions go to the model.
    """

    def __init__(self, inner: Any, *, batch_size: int = 32) -> None:
        self.inner = inner
        self.batch_size = batch_size
        self._rows: dict[str, np.ndarray] = {}

    def prefill(self, questions: Sequence[str], on_progress: Callable[[int, int], None] | None = None) -> None:
        todo = list(dict.fromkeys(q for q in questions if q not in self._rows))
        for start in range(0, len(todo), self.batch_size):
            batch = todo[start : start + self.batch_size]
            for q, row in zip(batch, self.inner.embed_queries(batch)):
                self._rows[q] = np.asarray(row, dtype=np.float32)
            if on_progress is not None:
                on_progress(min(start + self.batch_size, len(todo)), len(todo))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in texts if t not in self._rows]
        if missing:
            for q, row in zip(missing, self.inner.embed_queries(missing)):
                self._rows[q] = np.asarray(row, dtype=np.float32)
        return np.stack([self._rows[t] for t in texts])

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_passages(texts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
