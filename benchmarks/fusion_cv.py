"""Fusion functions the product does not have, each judged by leave-one-set-out cross-validation
from ``benchmarks/quality.py``'s candidates (issue 20, fourth pass). Nothing here is in the product.

Every candidate of a question carries both exact scores (cosine, BM25) and each leg's own rank, so a
fusion function is scored offline: order the candidates by its fused score (ties by chunk_id, as the
statement), then document-level nDCG@10 as ``quality.py``. Families tried (each with the dense
share ``s`` over ``quality.SHARES`` and copies collapsed or kept, like the existing ones):

- ``rrf``, ``tmm``, ``minmax``: the product's functions (:func:`metis_pg.fusion.fuse`), the baseline;
  rrf also at each RRF constant of ``quality.RRF_KS`` (``rrf k5`` ...), as ``quality.py`` fits it.
- ``z-own`` / ``z-union``: ``s * z(cos) + (1 - s) * z(bm25)``, each score standardized by the mean
  and (population) standard deviation of its leg's own top list (``own``) or of every candidate
  (``union``); a missing score is z = -3.
- ``dbsf-own`` / ``dbsf-union``: distribution-based score fusion, each z mapped to
  ``(z + 3) / 6`` clipped to [0, 1] (mean +- 3 sd as the bounds of a min-max).
- ``conf-rrf g m``: weighted RRF whose per-question dense share is
  ``s e^(g c_d) / (s e^(g c_d) + (1 - s) e^(g c_k))``: each leg's weight grows with its
  confidence ``c = (score at rank 1 - score at rank m) / sd`` of its own top list (0 with fewer
  than m rows or sd 0).
- ``tie-rrf d k``: weighted RRF over ranks where a score within ``eps * sd`` (eps d for the dense
  leg, k for the keyword leg) of its tie group's first score takes that group's first rank.
- ``union-rrf``: weighted RRF over ranks of every candidate by its complete score (not the legs' own).
- ``prf-own`` / ``prf-union b m``: pseudo-relevance feedback over the candidates only: the cosine of
  each candidate with ``q + b * mean(vectors of the top m of weighted RRF)`` (Rocchio; here
  ``cos + b * (mean . v) / |v|``, the same order), the dense ranks recomputed over the dense leg's
  own list (``own``) or every candidate with a vector (``union``), then weighted RRF again. Needs
  the candidates' stored vectors: ``--home`` (a METIS_HOME holding the bases; read once, cached
  by ``--vectors``).

A family is fitted on all sets but one group (a set and its variants share a base), by the mean of
the sets' nDCG@10 (each set weighs the same), and scored on the group left out. Families are
compared with the product's protocol (``existing``: rrf, tmm and minmax): a new family is the
existing one plus its own settings, so CV may keep the old ones. Each row also says how the
held-out scores stand against the rule for changing the product's default: the held-out mean above
the default's, no set more than .005 below the default (``worst set vs the default``), and no more
sets below their better leg, or below RRF 1:1 (copies kept, as ``quality.py``'s row), than the
default (``rule``: passes / fails).

Usage::

    python benchmarks/fusion_cv.py --from-candidates cands9b.json --from-candidates cands-cran.json \
        --home /var/tmp/home-copy --vectors vectors.pkl --pickle scores.pkl     # ~20 min on a busy 2-core box
    python benchmarks/fusion_cv.py --scores scores.pkl                          # the table again, no scoring
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import quality  # noqa: E402

from metis_pg import fusion  # noqa: E402

SHARES = quality.SHARES
RRF_K = 60
Cands = list  # (dense, dense_rank, keyword, keyword_rank, chunk_id)


def rrf(c: Cands, s: float, dense_ranks: dict[int, int] | None = None,
        keyword_ranks: dict[int, int] | None = None, k: int = RRF_K) -> list[float]:
    """Weighted RRF (weights 2s and 2(1 - s), constant k); ranks default to the legs' own."""
    rd = dense_ranks if dense_ranks is not None else {i: x[1] for i, x in enumerate(c) if x[1]}
    rk = keyword_ranks if keyword_ranks is not None else {i: x[3] for i, x in enumerate(c) if x[3]}
    return [(2 * s / (k + rd[i]) if i in rd else 0.0) + (2 * (1 - s) / (k + rk[i]) if i in rk else 0.0)
            for i in range(len(c))]


def leg_stats(c: Cands, score: int, rank: int) -> tuple[float, float, list[float]]:
    """Mean, population sd and descending scores of a leg's own top list (score/rank: tuple indexes)."""
    xs = [x[score] for x in c if x[rank] and x[score] is not None]
    if not xs:
        return 0.0, 1.0, []
    mu = sum(xs) / len(xs)
    return mu, math.sqrt(sum((x - mu) ** 2 for x in xs) / len(xs)), sorted(xs, reverse=True)


def z_fuse(c: Cands, s: float, clip: bool, stats: str) -> list[float]:
    if stats == "own":
        (md, sd, _), (mk, sk, _) = leg_stats(c, 0, 1), leg_stats(c, 2, 3)
    else:
        ds, ks = [x[0] for x in c if x[0] is not None], [x[2] for x in c if x[2] is not None]
        md, mk, sd, sk = np.mean(ds), np.mean(ks), np.std(ds), np.std(ks)
    sd, sk = sd or 1.0, sk or 1.0
    out = []
    for d, _, k, _, _ in c:
        zd = (d - md) / sd if d is not None else -3.0
        zk = (k - mk) / sk if k is not None else -3.0
        if clip:
            zd, zk = min(1.0, max(0.0, (zd + 3) / 6)), min(1.0, max(0.0, (zk + 3) / 6))
        out.append(s * zd + (1 - s) * zk)
    return out


def confidence(c: Cands, score: int, rank: int, m: int) -> float:
    _, sd, xs = leg_stats(c, score, rank)
    return (xs[0] - xs[m - 1]) / sd if len(xs) >= m and sd else 0.0


def conf_rrf(c: Cands, s: float, g: float, m: int) -> list[float]:
    lo = math.log(s / (1 - s)) + g * (confidence(c, 0, 1, m) - confidence(c, 2, 3, m))
    return rrf(c, 1 / (1 + math.exp(-lo)))


def tie_ranks(c: Cands, score: int, rank: int, eps: float) -> dict[int, int]:
    _, sd, _ = leg_stats(c, score, rank)
    out, head_score, head_rank = {}, None, None
    for r, i in sorted((x[rank], i) for i, x in enumerate(c) if x[rank]):
        if head_score is None or head_score - c[i][score] > eps * sd:
            head_score, head_rank = c[i][score], r
        out[i] = head_rank
    return out


def tie_rrf(c: Cands, s: float, ed: float, ek: float) -> list[float]:
    return rrf(c, s, tie_ranks(c, 0, 1, ed) if ed else None, tie_ranks(c, 2, 3, ek) if ek else None)


def _ranks(scores: dict[int, float]) -> dict[int, int]:
    return {i: r + 1 for r, i in enumerate(sorted(scores, key=lambda i: (-scores[i], i)))}


def union_rrf(c: Cands, s: float) -> list[float]:
    rd = _ranks({i: x[0] if x[0] is not None else -2.0 for i, x in enumerate(c)})
    rk = _ranks({i: x[2] if x[2] is not None else -1.0 for i, x in enumerate(c)})
    return rrf(c, s, rd, rk)


def prf(c: Cands, s: float, b: float, m: int, scope: str, vectors: dict[int, np.ndarray]) -> list[float]:
    first = rrf(c, s)
    top = sorted(range(len(c)), key=lambda i: (-first[i], c[i][4]))[:m]
    centre = np.mean([vectors[c[i][4]] for i in top], axis=0)
    moved = {i: x[0] + b * float(centre @ vectors[x[4]]) / float(np.linalg.norm(vectors[x[4]]))
             for i, x in enumerate(c) if x[0] is not None and (scope == "union" or x[1])}
    return rrf(c, s, _ranks(moved))


def settings(vectors: dict[int, np.ndarray] | None) -> dict[tuple[str, float], Callable[[Cands], list[float]]]:
    """Every (family member, share) scored: the grids of the fourth pass, all of them."""
    out: dict[tuple[str, float], Callable[[Cands], list[float]]] = {}
    inner = [s for s in SHARES if 0 < s < 1]
    for s in SHARES:
        out[("rrf", s)] = lambda c, s=s: rrf(c, s)
        for k in quality.RRF_KS[1:]:  # the RRF constants quality.py fits (60 above)
            out[(f"rrf k{k}", s)] = lambda c, s=s, k=k: rrf(c, s, k=k)
        for norm in ("tmm", "minmax"):
            out[(norm, s)] = lambda c, s=s, n=norm: fusion.fuse(c, "convex", s, normalization=n)
        for clip in (False, True):
            for stats in ("own", "union"):
                out[(f"{'dbsf' if clip else 'z'}-{stats}", s)] = lambda c, s=s, cl=clip, st=stats: z_fuse(c, s, cl, st)
        out[("union-rrf", s)] = lambda c, s=s: union_rrf(c, s)
        for ed in (0, 0.05, 0.1, 0.2, 0.4):
            for ek in (0, 0.05, 0.1, 0.2, 0.4):
                if ed or ek:
                    out[(f"tie-rrf d{ed} k{ek}", s)] = lambda c, s=s, ed=ed, ek=ek: tie_rrf(c, s, ed, ek)
    conf = {(g, m) for g in (0.1, 0.25, 0.5, 1.0, 2.0) for m in (2, 3, 5, 10)}
    conf_high = {(g, m) for g in (0.75, 1.25, 1.5) for m in (2, 3, 4, 5, 7, 10)} | {(1.0, 4), (1.0, 7)}
    for s in inner:
        for g, m in sorted(conf | (conf_high if s >= 0.5 else set())):
            out[(f"conf-rrf g{g} m{m}", s)] = lambda c, s=s, g=g, m=m: conf_rrf(c, s, g, m)
    if vectors is not None:
        for s in (x for x in SHARES if 0.3 <= x <= 0.8):
            for b in (0.25, 0.5, 1.0):
                for m in (1, 3, 5, 10):
                    for scope in ("own", "union"):
                        out[(f"prf-{scope} b{b} m{m}", s)] = (
                            lambda c, s=s, b=b, m=m, sc=scope: prf(c, s, b, m, sc, vectors))
    return out


FAMILIES = {"z": ("z-own", "z-union"), "dbsf": ("dbsf-own", "dbsf-union"), "conf-rrf": ("conf-rrf",),
            "tie-rrf": ("tie-rrf",), "union-rrf": ("union-rrf",), "prf": ("prf-own", "prf-union")}
EXISTING = ("rrf", "tmm", "minmax")


def score_all(sets: dict[str, list[quality.Question]], vectors: dict[int, np.ndarray] | None) -> dict[Any, Any]:
    """nDCG@10 / Recall@10 / MRR@10 of every question under every setting: {(key, collapse): {set: array}}."""
    out: dict[Any, Any] = {}
    every = settings(vectors)
    # Ties in a fit go to the first: copies kept before collapsed, the existing functions first, each
    # function's shares ascending (the order of quality.py's fit).
    order = {name: i for i, name in enumerate(("rrf", "tmm", "minmax"))}
    keys = sorted(every, key=lambda k: (order.get(k[0].split(" ")[0], len(order)), k[0], k[1]))
    for collapse in (False, True):
        for key in keys:
            f = every[key]
            per = {}
            for name, qs in sets.items():
                rows = []
                for q in qs:
                    c = q.variants[collapse]
                    fused = f(c)
                    rows.append(q.metrics(sorted(range(len(c)), key=lambda i: (-fused[i], c[i][4])), collapse))
                per[name] = np.array(rows)
            out[(key, collapse)] = per
    # The baselines of the rule (quality.py's rows, copies kept): each leg alone and RRF 1:1.
    for label, f in (("leg keyword", lambda q: q.leg(3)), ("leg dense", lambda q: q.leg(1)),
                     ("leg rrf-1:1", lambda q: q.fused("rrf", 0.5))):
        out[((label, 0.0), False)] = {name: np.array([f(q) for q in qs]) for name, qs in sets.items()}
    return out


def read_vectors(home: Path, chunk_ids: set[int]) -> dict[int, np.ndarray]:
    """The stored vectors of these chunks, from the embedded server of a METIS_HOME (read only)."""
    import psycopg

    from metis_pg.db.embedded import embedded_dsn

    with psycopg.connect(embedded_dsn(home / "pgdata")) as conn:
        rows = conn.execute("SELECT chunk_id, embedding::text FROM embeddings WHERE chunk_id = ANY(%s)",
                            (sorted(chunk_ids),)).fetchall()
    return {cid: np.array(json.loads(text), dtype=np.float32) for cid, text in rows}


def report(scores: dict[Any, Any], groups: dict[str, str]) -> list[str]:
    """The cross-validation table, one row per family (markdown lines)."""
    names = list(groups)
    mean = {k: {n: v[n].mean(axis=0)[0] for n in names} for k, v in scores.items()}

    def members(prefixes: tuple[str, ...]) -> list[Any]:
        return [k for k in scores if k[0][0].split(" ")[0] in EXISTING + prefixes]

    def fit(keys: list[Any], train: list[str]) -> Any:
        """The best mean over `train` (ties: the first key); no training set (one group): over all."""
        train = train or names
        return max(enumerate(keys), key=lambda ik: (sum(mean[ik[1]][n] for n in train) / len(train), -ik[0]))[1]

    def cv(keys: list[Any]) -> dict[str, tuple[Any, float]]:
        out = {}
        for g in sorted(set(groups.values())):
            chosen = fit(keys, [n for n in names if groups[n] != g])
            out.update({n: (chosen, mean[chosen][n]) for n in names if groups[n] == g})
        return out

    def label(k: Any) -> str:
        return f"{k[0][0]} s {k[0][1]:.2f}{', collapsed' if k[1] else ''}"

    base = cv(members(()))
    default = quality.default_setting()
    key = ((default.function if default.rrf_k == 60 else f"rrf k{default.rrf_k}",
            min(SHARES, key=lambda x: abs(x - default.share))), default.collapse)
    today = mean[key]
    legs = {n: max(mean[(("leg keyword", 0.0), False)][n], mean[(("leg dense", 0.0), False)][n]) for n in names}
    rrf11 = mean[(("leg rrf-1:1", 0.0), False)]

    def below(score: dict[str, float]) -> tuple[int, int]:
        """How many sets score below their better leg, and below RRF 1:1 (to 1e-9)."""
        return (sum(score[n] < legs[n] - 1e-9 for n in names), sum(score[n] < rrf11[n] - 1e-9 for n in names))

    today_below = below(today)
    folds: list[str] = []
    lines = ["| family | fitted on all (in-sample mean) | held-out mean | " + " | ".join(names)
             + " | worst set vs existing | worst set vs the default | sets below better leg / RRF 1:1 | rule |",
             "|---|---|---:|" + "---:|" * len(names) + "---|---|---|---|"]
    for label_, row in (("keyword alone", {n: mean[(("leg keyword", 0.0), False)][n] for n in names}),
                        ("dense alone", {n: mean[(("leg dense", 0.0), False)][n] for n in names}),
                        ("RRF 1:1", rrf11)):
        lines.append(f"| {label_} | – | {np.mean([row[n] for n in names]):.4f} | "
                     + " | ".join(f"{row[n]:.3f}" for n in names) + " | – | – | – | – |")
    lines.append(f"| the default ({label(key)}), not held out | – | {np.mean([today[n] for n in names]):.4f} | "
                 + " | ".join(f"{today[n]:.3f}" for n in names)
                 + f" | – | – | {today_below[0]} / {today_below[1]} | – |")
    for family, prefixes in (("existing (rrf, tmm, minmax)", ()), *((f"existing + {f}", p) for f, p in FAMILIES.items())):
        keys = members(prefixes)
        if family != "existing (rrf, tmm, minmax)" and len(keys) == len(members(())):
            continue  # no settings of this family were scored (prf without vectors)
        chosen, held = fit(keys, names), cv(keys)
        in_sample = sum(mean[chosen][n] for n in names) / len(names)
        worst = min(names, key=lambda n: held[n][1] - base[n][1])
        worst_d = min(names, key=lambda n: held[n][1] - today[n])
        h = {n: held[n][1] for n in names}
        nb = below(h)
        passes = (np.mean(list(h.values())) > np.mean(list(today.values())) and h[worst_d] - today[worst_d] >= -0.005
                  and nb[0] <= today_below[0] and nb[1] <= today_below[1])
        lines.append(f"| {family} | {label(chosen)} ({in_sample:.4f}) | {np.mean(list(h.values())):.4f} | "
                     + " | ".join(f"{h[n]:.3f}" for n in names)
                     + f" | {worst} {held[worst][1] - base[worst][1]:+.3f} | {worst_d} {h[worst_d] - today[worst_d]:+.3f}"
                     + f" | {nb[0]} / {nb[1]} | {'passes' if passes else 'fails'} |")
        folds.append(f"- {family}: " + "; ".join(
            f"{g}: {label(next(held[n][0] for n in names if groups[n] == g))}" for g in sorted(set(groups.values()))))
    if len(set(groups.values())) == 1:
        lines.insert(0, "One group only: nothing is held out, each row is fitted on it (in-sample).\n")
    return lines + ["", "Chosen in each fold (the group left out: the setting fitted on the others):", ""] + folds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--from-candidates", type=Path, action="append", default=[],
                        help="quality.py --candidates file (repeatable)")
    parser.add_argument("--home", type=Path, help="METIS_HOME of the bases, for the candidates' vectors (PRF)")
    parser.add_argument("--vectors", type=Path, help="cache of the candidates' vectors (pickle; read if it exists)")
    parser.add_argument("--pickle", type=Path, help="write every setting's per-question scores here")
    parser.add_argument("--scores", type=Path, help="read them from here instead of scoring")
    args = parser.parse_args(argv)
    if args.scores:
        saved = pickle.loads(args.scores.read_bytes())
    else:
        data: dict[str, dict[str, Any]] = {"sets": {}, "groups": {}}
        for path in args.from_candidates:
            more = json.loads(path.read_text(encoding="utf-8"))
            data["sets"].update(more["sets"])
            data["groups"].update(more["groups"])
        sets = {n: [quality.Question(q) for q in qs] for n, qs in data["sets"].items()}
        vectors = None
        ids = {c[4] for qs in sets.values() for q in qs for cs in q.variants.values() for c in cs}
        if args.vectors and args.vectors.exists():
            vectors = pickle.loads(args.vectors.read_bytes())
        elif args.home:
            vectors = read_vectors(args.home, ids)
            if args.vectors:
                args.vectors.write_bytes(pickle.dumps(vectors))
        if vectors is not None and not ids <= vectors.keys():
            print(f"{len(ids - vectors.keys())} candidates have no vector here: PRF not scored", file=sys.stderr)
            vectors = None
        saved = {"scores": score_all(sets, vectors), "groups": data["groups"]}
        if args.pickle:
            args.pickle.write_bytes(pickle.dumps(saved))
    print("\n".join(report(saved["scores"], saved["groups"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
