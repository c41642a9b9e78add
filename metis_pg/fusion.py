"""Fusion functions of the two legs, as ``sql/search/hybrid.sql`` computes them (issue 20).

Every candidate either leg kept carries both complete scores (its exact cosine and its exact
BM25) and each leg's own rank (None when that leg did not keep it). The dense leg's *share*
``s`` in [0, 1] (after routing, :mod:`metis_pg.routing`) then weighs the legs:

- ``rrf`` (Cormack, Clarke & Buettcher, SIGIR 2009, a weight per list):
  ``W * s / (rrf_k + dense_rank) + W * (1 - s) / (rrf_k + keyword_rank)``, a missing rank
  adding 0, with ``W = dense_weight + keyword_weight`` and, before routing,
  ``s = dense_weight / W`` (so weights 2 : 1 are ``s = 2/3``).
- ``convex`` (Bruch, Gai & Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval",
  ACM TOIS 42(1), 2023): ``s * N(cosine) + (1 - s) * N(BM25)``, ``s`` being alpha, with
  ``minmax`` ``N(x) = (x - min) / (max - min)`` over the candidates (1 when all are equal and
  BM25 > 0), or ``tmm`` (the paper's TM2C2) ``N(x) = (x - inf) / (max - inf)`` from each
  score's theoretical infimum (cosine -1, BM25 0) to the candidates' best. A missing score
  (a chunk without a vector yet; a leg switched off) counts 0. Or ``z``, each score standardized
  by its own leg's list: ``N(x) = (x - mean) / sd``, mean and population standard deviation of
  the scores of the candidates that leg ranked (sd 0: 1; no such candidate: mean 0, sd 1); a
  missing score counts -3 (three deviations below the leg's mean). z-score normalization is the
  "standard" normalization of Montague & Aslam, "Relevance Score Normalization for Metasearch"
  (CIKM 2001), and of Bruch, Gai & Ingber §4; unlike min-max it does not stretch the small spread
  of a narrow cosine range over [0, 1] (issue 20, docs/quality.md).

:func:`fuse` is the same arithmetic in Python, for the evaluation of many settings from one
statement's candidates (``benchmarks/quality.py``); ``tests/test_fusion_functions.py`` checks
that both order candidates the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import routing

__all__ = ["Plan", "plan", "fuse", "Scored", "FUSION_FIELDS", "COLLAPSE_COPIES", "fusion_problem"]


#: The fusion parameters of a base's spec that a search may override (``fusion=``).
FUSION_FIELDS = ("fusion", "normalization", "alpha", "routing", "rrf_k", "dense_weight", "keyword_weight",
                 "collapse_copies")
#: Whether copies of one text take one place in each leg when nothing says otherwise: the default
#: of ``BaseSpec.collapse_copies`` and of :class:`Plan` (so of ``retrieval.run_search`` and
#: ``retrieval.fuse_bases`` called without a plan). On, as cross-validation chose (issue 20,
#: docs/quality.md); a spec stored before the setting existed reads off (``BaseSpec.from_json``).
COLLAPSE_COPIES = True
#: Fusion functions (``BaseSpec.fusion``) and the normalizations of ``convex``.
FUSION_FUNCTIONS = ("rrf", "convex")
NORMALIZATIONS = ("tmm", "minmax", "z")


def fusion_problem(fusion: Any = "rrf", normalization: Any = "tmm", alpha: Any = 0.5, routing: Any = False,
                   rrf_k: Any = 60, dense_weight: Any = 1.0, keyword_weight: Any = 1.0,
                   collapse_copies: Any = COLLAPSE_COPIES) -> str | None:
    """Return what is wrong with these fusion parameters, or None when they are valid.

    fusion: ``rrf`` or ``convex``; normalization: ``tmm``, ``minmax`` or ``z``; alpha: a number from
    0 to 1; routing: true or false; rrf_k: a whole number from 1 to 10,000; each weight: a
    finite number >= 0, not both 0; collapse_copies: true or false.
    """
    if fusion not in FUSION_FUNCTIONS:
        return f"fusion must be one of {', '.join(FUSION_FUNCTIONS)}, not {fusion!r}"
    if normalization not in NORMALIZATIONS:
        return f"normalization must be one of {', '.join(NORMALIZATIONS)}, not {normalization!r}"
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
        return f"alpha must be a number from 0 to 1, not {alpha!r}"
    for name, value in (("routing", routing), ("collapse_copies", collapse_copies)):
        if not isinstance(value, bool):
            return f"{name} must be true or false, not {value!r}"
    if isinstance(rrf_k, bool) or not (isinstance(rrf_k, int) and 1 <= rrf_k <= 10_000):
        return f"rrf_k must be a whole number from 1 to 10000, not {rrf_k!r}"
    for name, value in (("dense_weight", dense_weight), ("keyword_weight", keyword_weight)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            return f"{name} must be a finite number >= 0, not {value!r}"
    if dense_weight == 0 and keyword_weight == 0:
        return "dense_weight and keyword_weight cannot both be 0"
    return None


@dataclass(frozen=True, slots=True)
class Plan:
    """What the statement needs to fuse one question (its parameters of the same names)."""

    fusion: str
    normalization: str
    rrf_k: int
    weight_sum: float
    dense_share: float
    route_absent: float
    route_weak: float
    weak_ratio: float
    fired: tuple[str, ...]
    #: In each leg, the chunks of one text take one place, held by a copy that still holds.
    collapse_copies: bool = COLLAPSE_COPIES

    def params(self) -> dict[str, Any]:
        return {"fusion": self.fusion, "normalization": self.normalization, "rrf_k": self.rrf_k,
                "weight_sum": self.weight_sum, "dense_share": self.dense_share, "route_absent": self.route_absent,
                "route_weak": self.route_weak, "weak_ratio": self.weak_ratio}


def base_share(spec: Any) -> float:
    """The dense share of a spec before routing: alpha (convex) or dense_weight / the weights' sum."""
    if spec.fusion == "convex":
        return float(spec.alpha)
    return spec.dense_weight / (spec.dense_weight + spec.keyword_weight)


def plan(spec: Any, question: str, shifts: dict[str, float] | None = None) -> Plan:
    """Return the fusion plan of `question` for a base spec (:class:`~metis_pg.config.BaseSpec`).

    With ``spec.routing`` the question's model-free features shift the share
    (:mod:`metis_pg.routing`); the statement adds the shifts of ``absent`` and ``weak_bm25``.
    """
    shifts = routing.SHIFTS if shifts is None else shifts
    share = base_share(spec)
    fired: tuple[str, ...] = ()
    absent = weak = 0.0
    if spec.routing:
        found = routing.features(question)
        fired = tuple(found.fired())
        share = min(1.0, max(0.0, share + found.shift(shifts)))
        absent, weak = shifts["absent"], shifts["weak_bm25"]
    return Plan(fusion=spec.fusion, normalization=spec.normalization, rrf_k=spec.rrf_k,
                weight_sum=spec.dense_weight + spec.keyword_weight, dense_share=share, route_absent=absent,
                route_weak=weak, weak_ratio=routing.WEAK_RATIO, fired=fired,
                collapse_copies=bool(spec.collapse_copies))


#: A candidate for :func:`fuse`: (dense score, dense rank, keyword score, keyword rank, chunk_id).
Scored = tuple


def fuse(cands: Sequence[Scored], fusion: str, share: float, *, normalization: str = "tmm", rrf_k: int = 60,
         weight_sum: float = 2.0) -> list[float]:
    """Return the fused score of each candidate, as the statement computes it (same float steps).

    `share` is the dense share after routing. Order by (-fused, chunk_id) as the statement does.
    """
    if fusion == "rrf":
        wd, wk = weight_sum * share, weight_sum * (1 - share)
        return [(wd / (rrf_k + dr) if dr else 0.0) + (wk / (rrf_k + kr) if kr else 0.0) for _, dr, _, kr, _ in cands]
    if normalization == "z":
        return _z_fuse(cands, share)
    dense = [c[0] for c in cands if c[0] is not None]
    keyword = [c[2] for c in cands if c[2] is not None]
    dmin, dmax = (min(dense), max(dense)) if dense else (None, None)
    kmin, kmax = (min(keyword), max(keyword)) if keyword else (None, None)
    out = []
    for d, _, k, _, _ in cands:
        if normalization == "minmax":
            nd = 0.0 if d is None else ((d - dmin) / (dmax - dmin) if dmax > dmin else 1.0)
            nk = 0.0 if k is None else ((k - kmin) / (kmax - kmin) if kmax > kmin else float(k > 0))
        else:
            nd = 0.0 if d is None or dmax + 1 == 0 else (d + 1) / (dmax + 1)
            nk = 0.0 if k is None or not kmax else k / kmax
        out.append(share * nd + (1 - share) * nk)
    return out


def _leg_stats(scores: list[float]) -> tuple[float, float]:
    """Mean and population standard deviation (0: 1) of one leg's own list; empty: (0, 1)."""
    if not scores:
        return 0.0, 1.0
    mean = sum(scores) / len(scores)
    sd = math.sqrt(sum((x - mean) ** 2 for x in scores) / len(scores))
    return mean, sd or 1.0


def _z_fuse(cands: Sequence[Scored], share: float) -> list[float]:
    """``share * z(cosine) + (1 - share) * z(BM25)``, each z over the leg's own list; missing: -3."""
    dmean, dsd = _leg_stats([d for d, dr, _, _, _ in cands if dr and d is not None])
    kmean, ksd = _leg_stats([k for _, _, k, kr, _ in cands if kr and k is not None])
    return [share * (-3.0 if d is None else (d - dmean) / dsd) + (1 - share) * (-3.0 if k is None else (k - kmean) / ksd)
            for d, _, k, _, _ in cands]
