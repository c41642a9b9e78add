"""Metrics of an evaluation, on the ranked list of *units* a search returned (see the package docstring).

nDCG@10 (trec_eval ``ndcg_cut``; Järvelin & Kekäläinen 2002), Recall@k, MRR@10,
zero-result rate, and p50 / p95 latency.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Metrics", "QueryScore", "ndcg_at_k", "recall_at_k", "mrr_at_k", "ranked_units", "summarize", "ResultKey"]


from .sets import Judgment


# -- metrics -------------------------------------------------------------------


def ndcg_at_k(ranking: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """Return nDCG@k: sum of grade / log2(rank + 1) over the first k, over the ideal.

    Linear gain and log2 discount, the ideal from all judged grades > 0, as in
    trec_eval's ``ndcg_cut`` (Järvelin & Kekäläinen 2002). 0.0 when nothing is relevant.
    """
    dcg = sum(max(grades.get(u, 0), 0) / math.log2(rank + 1) for rank, u in enumerate(ranking[:k], start=1))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, start=1))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranking: Sequence[str], grades: Mapping[str, int], k: int) -> float:
    """Return the share of relevant units (grade > 0) found in the first k (trec_eval ``recall``)."""
    relevant = {u for u, g in grades.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranking[:k])) / len(relevant)


def mrr_at_k(ranking: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """Return 1 / rank of the first relevant unit (grade > 0) within the first k, else 0."""
    for rank, u in enumerate(ranking[:k], start=1):
        if grades.get(u, 0) > 0:
            return 1.0 / rank
    return 0.0


#: (document, chunk_id, first line, page) of one result.
ResultKey = tuple[str, int, int | None, int | None]


def ranked_units(
    results: Sequence[ResultKey],
    judgments: Sequence[Judgment],
    chunk_lines: Mapping[str, Sequence[tuple[int, int]]] | None = None,
) -> list[str]:
    """Turn results into the ranked units they stand for, each unit once (first rank kept).

    A result is the unit of the first judgment it satisfies: a document-level
    judgment by any passage of the document; a page judgment by a passage on that
    page; a line judgment by the passage holding the line (the document's chunk
    with the last first-line at or before it, from `chunk_lines`: document →
    ``[(first line, chunk_id), ...]``). Other results are units of their own:
    their document when no judgment of the question is located, else their passage.
    """
    located = any(j.located for j in judgments)
    holding: dict[Judgment, int | None] = {}
    for j in judgments:
        if j.line is not None:
            spans = sorted((chunk_lines or {}).get(j.document, ()))
            before = [cid for first, cid in spans if first <= j.line]
            holding[j] = before[-1] if before else None
    units: list[str] = []
    seen: set[str] = set()
    for document, chunk_id, _line, page in results:
        unit = None
        for j in judgments:
            if j.document != document:
                continue
            if j.line is not None:
                hit = holding.get(j) == chunk_id
            elif j.page is not None:
                hit = page == j.page
            else:
                hit = True
            if hit:
                unit = j.unit
                break
        if unit is None:
            unit = f"{document}#chunk{chunk_id}" if located else document
        if unit not in seen:
            seen.add(unit)
            units.append(unit)
    return units


def _grades(judgments: Sequence[Judgment]) -> dict[str, int]:
    grades: dict[str, int] = {}
    for j in judgments:
        grades[j.unit] = max(grades.get(j.unit, j.grade), j.grade)
    return grades


# -- reports -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Metrics:
    """Averages over the questions of one mode (and one query type).

    Latencies are ms (``took.total`` of each search); rates are 0..1.
    """

    queries: int
    ndcg_at_10: float
    recall_at_10: float
    recall_at_50: float
    mrr_at_10: float
    zero_result_rate: float
    p50_ms: float
    p95_ms: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "queries": self.queries,
            "ndcg_at_10": round(self.ndcg_at_10, 4),
            "recall_at_10": round(self.recall_at_10, 4),
            "recall_at_50": round(self.recall_at_50, 4),
            "mrr_at_10": round(self.mrr_at_10, 4),
            "zero_result_rate": round(self.zero_result_rate, 4),
            "p50_ms": round(self.p50_ms, 2),
            "p95_ms": round(self.p95_ms, 2),
        }


@dataclass(frozen=True, slots=True)
class QueryScore:
    """One question in one mode: its scores, result count and latency (ms)."""

    query_id: str
    query_type: str
    group: str | None
    mode: str
    ndcg_at_10: float
    recall_at_10: float
    recall_at_50: float
    mrr_at_10: float
    results: int
    took_ms: float
    units: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "query_id": self.query_id, "query_type": self.query_type, "group": self.group, "mode": self.mode,
            "ndcg_at_10": round(self.ndcg_at_10, 4), "recall_at_10": round(self.recall_at_10, 4),
            "recall_at_50": round(self.recall_at_50, 4), "mrr_at_10": round(self.mrr_at_10, 4),
            "results": self.results, "took_ms": round(self.took_ms, 2), "units": list(self.units[:10]),
        }


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else 0.0


def summarize(scores: Sequence[QueryScore]) -> Metrics:
    """Average the questions' scores; p50/p95 of their latencies."""
    n = len(scores)
    if n == 0:
        return Metrics(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    return Metrics(
        queries=n,
        ndcg_at_10=sum(s.ndcg_at_10 for s in scores) / n,
        recall_at_10=sum(s.recall_at_10 for s in scores) / n,
        recall_at_50=sum(s.recall_at_50 for s in scores) / n,
        mrr_at_10=sum(s.mrr_at_10 for s in scores) / n,
        zero_result_rate=sum(1 for s in scores if s.results == 0) / n,
        p50_ms=_percentile([s.took_ms for s in scores], 50),
        p95_ms=_percentile([s.took_ms for s in scores], 95),
    )
