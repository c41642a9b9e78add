"""Search quality per set and question type, with every default chosen by leave-one-set-out
cross-validation (issue 20).

For each evaluation set (the shared ones of ``../shared/data`` and ours of ``benchmarks/sets``)
whose base is indexed, each question is asked ONCE: one ``sql/search/hybrid.sql`` statement with
the legs cut as a default ``top_k=10`` search (50 passages each) returning every candidate of
both legs with its complete scores (exact cosine and exact BM25), each leg's rank, and the
statement's routing figures (share of absent words, best BM25 / bound). Everything below is
computed from those candidates (``--candidates`` keeps them; ``--from-candidates`` re-reads them
without a database), so no corpus is embedded twice:

- keyword (the keyword leg's order), dense (the dense leg's), hybrid RRF 1:1, the code's default
  (``BaseSpec()``), each fusion function of :mod:`metis_pg.fusion` at each dense share;
- each question is asked twice, with copies of one text collapsed in each leg and without
  (``retrieval.run_search(collapse_copies=)``), so that too is part of a setting;
- **the protocol**: a setting is (fusion function, dense share, RRF constant ``rrf_k``, copies
  collapsed or not, routing shifts of :mod:`metis_pg.routing`). For each set S (sets over one corpus are left out together), the
  setting that maximizes the mean over the OTHER sets of their nDCG@10 is fitted, then scored on
  S: the "held-out" row. The setting fitted on all sets is what the code's defaults are
  (``BaseSpec``, ``routing.SHIFTS``); its own rows are marked in-sample.

Metrics as ``docs/evaluation.md``: document-level nDCG@10 (linear gain), Recall@10, MRR@10, a
document counted once at its best passage.

Usage::

    METIS_HOME=/work/quality-home python benchmarks/quality.py --candidates cands.json   # asks the database
    python benchmarks/quality.py --from-candidates cands.json --json cv.json             # CV only, no database
    python benchmarks/quality.py --from-candidates cands.json --questions qmd-eval-docs  # who loses, and where
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

import metis_pg
import shared_sets as datasets
from metis_pg import evaluation, fusion, query_syntax, retrieval, routing
from metis_pg.config import BaseSpec, Settings
from metis_pg.tokenizer import query_terms

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
OWN = Path(__file__).resolve().parent / "sets"
err = Console(stderr=True)

#: Dense shares the settings are fitted over (0 = keyword only, 1 = dense only).
#: 1/3 and 2/3 are RRF 1:2 and 2:1.
SHARES = tuple(sorted({round(i / 20, 2) for i in range(21)} | {1 / 3, 2 / 3}))
FUNCTIONS = ("rrf", "tmm", "minmax", "z")
#: RRF constants the settings are fitted over (rrf only). 60 (Cormack et al.'s and SPEC F7's)
#: comes first, so that a tie keeps it.
RRF_KS = (60, 5, 10, 20, 30, 100)
#: Shifts routing may give a feature.
SHIFT_GRID = (-0.3, -0.2, -0.1, 0.0, 0.1, 0.2, 0.3)
#: A feature is kept in the routing rule only when it raises the training objective this much.
MIN_GAIN = 0.001


@dataclass(frozen=True)
class SetSpec:
    """An evaluation set: how to load it, the base it searches, the command of its row."""

    name: str
    load: Callable[[Path], evaluation.EvalSet]
    command: str
    base: str = ""

    @property
    def base_name(self) -> str:
        return self.base or self.name


def _beir(name: str) -> SetSpec:
    def load(home: Path) -> evaluation.EvalSet:
        return evaluation.load_beir(DATA / name, cache_dir=home / "eval-corpora" / name)

    return SetSpec(name, load, f"metis eval ../shared/data/{name}")


def _converted(folder: str, variant: str | None = None, base: str = "") -> SetSpec:
    option = f" --variant {variant}" if variant else ""
    name = datasets.convert(DATA / folder, variant).name
    return SetSpec(name, lambda home: datasets.convert(DATA / folder, variant),
                   f"python benchmarks/shared_sets.py ../shared/data/{folder}{option} -o {name}.json && "
                   f"metis eval {name}.json" + (f" --base {base}" if base else ""), base)


def _own(name: str) -> SetSpec:
    return SetSpec(name, lambda home: evaluation.load_eval_set(OWN / f"{name}.json"),
                   f"metis eval benchmarks/sets/{name}.json")


def all_sets() -> list[SetSpec]:
    return [
        _converted("gno-cjk-lexical"), _converted("gno-evals-multilingual"), _converted("gno-fastapi-multilingual"),
        _converted("qmd-eval-docs"), _converted("qmd-eval-docs", "queries", base="qmd-eval-docs"),
        _beir("agentset-arcd"), _beir("cranfield"), _beir("agentset-msmarco"), _beir("agentset-dbpedia"),
        _own("npm-docs"), _own("python3-doc"), _own("gno-e2e"),
    ]


# -- asking the database once per question --------------------------------------------------------

def collect(m: metis_pg.Metis, spec: SetSpec, eval_set: evaluation.EvalSet) -> list[dict[str, Any]]:
    """Each question's candidates (both legs cut at 50, complete scores) and routing figures."""
    row = m._base_row(spec.base_name)
    base_spec = BaseSpec.from_json(row.spec)
    embedder = m.embedder(base_spec)
    cached = evaluation.CachedQueries(embedder)
    cached.prefill([query_syntax.parse(q.question).text for q in eval_set.queries])
    out = []
    for q in eval_set.queries:
        out.append(_ask(m, row, base_spec, cached, q))
    return out


def _ask(m: metis_pg.Metis, row: Any, base_spec: BaseSpec, cached: evaluation.CachedQueries,
         q: evaluation.EvalQuery) -> dict[str, Any]:
    """One question's candidates, copies kept (``cands``) and collapsed (``cands_collapsed``)."""
    answers = {}
    for collapse in (False, True):
        # As a search asks it: a quoted phrase keeps only the chunks holding it, -word drops chunks.
        parsed = query_syntax.parse(q.question)
        vector = cached.embed_queries([parsed.text])[0]
        t0 = time.perf_counter()
        with m.pool.connection() as conn:
            only = retrieval.phrase_chunks(conn, [row.base_id], parsed.phrases) if parsed.phrases else None
            found, _ = retrieval.run_search(
                conn, base_ids=[row.base_id], model=base_spec.fingerprint, query_embedding=vector,
                terms=query_terms(parsed.text), top_k=2 * retrieval.leg_limit(10), legs_top_k=10,
                filters=retrieval.Filters(), k1=base_spec.k1, b=base_spec.b, only_chunks=only,
                exclude_terms=parsed.excluded, collapse_copies=collapse)
        answers[collapse] = (found, (time.perf_counter() - t0) * 1000)
    found, ms = answers[False]
    return {
        "id": q.query_id, "question": q.question, "type": q.type,
        "judgments": [[j.document, j.grade, j.line, j.page] for j in q.judgments],
        "absent": found[0].absent_share if found else 0.0, "ratio": found[0].bm25_ratio if found else 1.0,
        "features": routing.features(q.question).fired(),
        **{key: [[c.dense, c.dense_rank, c.keyword, c.keyword_rank, c.chunk_id, c.document, c.line, c.page]
                 for c in answers[collapse][0]] for key, collapse in (("cands", False), ("cands_collapsed", True))},
        "ms": ms, "ms_collapsed": answers[True][1],
    }


# -- scoring ------------------------------------------------------------------------------------

class Question:
    """One question's candidates, judgments and features, ready to be scored many ways."""

    def __init__(self, data: dict[str, Any]):
        self.id, self.type, self.question = data["id"], data["type"], data["question"]
        self.judgments = [evaluation.Judgment(d, g, line=l, page=p) for d, g, l, p in data["judgments"]]
        self.grades = {j.unit: j.grade for j in self.judgments}
        # Per variant (copies collapsed or not): the candidates, and the units they are judged by.
        # A file of an earlier run has no collapsed candidates: both variants are then the same.
        lists = {False: data["cands"], True: data.get("cands_collapsed", data["cands"])}
        self.collapsed_known = "cands_collapsed" in data
        self.variants = {v: [tuple(c[:5]) for c in cs] for v, cs in lists.items()}
        self.variant_keys = {v: [(c[5], c[4], c[6], c[7]) for c in cs] for v, cs in lists.items()}
        self.cands, self.keys = self.variants[False], self.variant_keys[False]
        self.absent, self.ratio = data["absent"] or 0.0, data["ratio"] if data["ratio"] is not None else 1.0
        self.features = set(data["features"])
        self._cache: dict[tuple, tuple[float, float, float]] = {}

    def metrics(self, order: list[int], collapse: bool = False) -> tuple[float, float, float]:
        keys = self.variant_keys[collapse]
        units = evaluation.ranked_units([keys[i] for i in order], self.judgments)
        return (evaluation.ndcg_at_k(units, self.grades, 10), evaluation.recall_at_k(units, self.grades, 10),
                evaluation.mrr_at_k(units, self.grades, 10))

    def leg(self, which: int, collapse: bool = False) -> tuple[float, float, float]:
        """A leg alone: its own order (index 1 dense rank, 3 keyword rank)."""
        ranked = sorted((c[which], i) for i, c in enumerate(self.variants[collapse]) if c[which])
        return self.metrics([i for _, i in ranked], collapse)

    def order(self, function: str, share: float, weight_sum: float = 2.0, collapse: bool = False,
              rrf_k: int = 60) -> list[int]:
        """The candidates' indexes in fused order (ties by chunk_id, as the statement)."""
        cands = self.variants[collapse]
        name, norm = ("rrf", "tmm") if function == "rrf" else ("convex", function)
        scores = fusion.fuse(cands, name, share, normalization=norm, rrf_k=rrf_k, weight_sum=weight_sum)
        return sorted(range(len(cands)), key=lambda i: (-scores[i], cands[i][4]))

    def fused(self, function: str, share: float, weight_sum: float = 2.0,
              collapse: bool = False, rrf_k: int = 60) -> tuple[float, float, float]:
        key = (function, share, weight_sum, collapse, rrf_k)
        if key not in self._cache:
            self._cache[key] = self.metrics(self.order(function, share, weight_sum, collapse, rrf_k), collapse)
        return self._cache[key]


@dataclass(frozen=True)
class Setting:
    """A fusion setting: function (rrf, tmm, minmax), dense share, copies collapsed in each leg or
    not, routing shifts (empty: off), and the RRF constant (rrf only)."""

    function: str
    share: float
    shifts: tuple[tuple[str, float], ...] = ()
    collapse: bool = False
    rrf_k: int = 60

    def share_for(self, q: Question) -> float:
        if not self.shifts:
            return self.share
        shifts = dict(self.shifts)
        s = min(1.0, max(0.0, self.share + sum(shifts.get(f, 0.0) for f in q.features)))
        s += shifts.get("absent", 0.0) * q.absent
        if q.ratio < routing.WEAK_RATIO:
            s += shifts.get("weak_bm25", 0.0)
        return min(1.0, max(0.0, s))

    def score(self, q: Question, exact: bool = False) -> tuple[float, float, float]:
        share = self.share_for(q)
        if not exact:  # fitting: the nearest share of the grid (cached)
            share = min(SHARES, key=lambda g: abs(g - share))
        return q.fused(self.function, share, collapse=self.collapse, rrf_k=self.rrf_k)

    def describe(self) -> str:
        base = f"{'RRF' if self.function == 'rrf' else 'CC ' + self.function.upper()} share {self.share:.2f}"
        base += f", k {self.rrf_k}" if self.function == "rrf" and self.rrf_k != 60 else ""
        base += ", copies collapsed" if self.collapse else ""
        routed = ", ".join(f"{k} {v:+.1f}" for k, v in self.shifts if v)
        return base + (f", routed ({routed})" if routed else "")


def copies_at_default(sets: dict[str, list[Question]], groups: dict[str, str]) -> dict[str, Any]:
    """Copies collapsed or kept, the default's fusion fixed: chosen on all sets and on each fold's
    training sets ("tie" when both score the same there)."""
    def choose(train: dict[str, list[Question]]) -> str:
        if not train:  # one set only: its fold has nothing to fit on
            return "no other set"
        kept, collapsed = (objective(train, replace(default_setting(), collapse=c)) for c in (False, True))
        return "collapsed" if collapsed > kept else "kept" if kept > collapsed else "tie"
    folds = {g: choose({n: qs for n, qs in sets.items() if groups[n] != g}) for g in sorted(set(groups.values()))}
    return {"all": choose(sets), "folds": folds}


def default_setting() -> Setting:
    """The code's default: a new base's fusion (``BaseSpec()``), unrouted."""
    spec = BaseSpec()
    return Setting("rrf" if spec.fusion == "rrf" else spec.normalization, fusion.base_share(spec),
                   collapse=bool(getattr(spec, "collapse_copies", False)), rrf_k=spec.rrf_k)


def set_mean(qs: list[Question], setting: Setting, exact: bool = False) -> float:
    return sum(setting.score(q, exact)[0] for q in qs) / len(qs)


def objective(sets: dict[str, list[Question]], setting: Setting) -> float:
    """Mean over the sets of their mean nDCG@10: each set weighs the same."""
    return sum(set_mean(qs, setting) for qs in sets.values()) / len(sets)


def fit(sets: dict[str, list[Question]], routed: bool = True) -> Setting:
    """The setting of best :func:`objective` on `sets`: function and share over the grid, then the
    routing shifts feature by feature (two sweeps), each kept only when it gains :data:`MIN_GAIN`."""
    collapses = (False, True) if all(q.collapsed_known for qs in sets.values() for q in qs) else (False,)
    grid = [Setting(f, s, (), c, k) for c in collapses for f in FUNCTIONS for s in SHARES
            for k in (RRF_KS if f == "rrf" else (60,))]
    best = max(grid, key=lambda st: objective(sets, st))
    best_value = objective(sets, best)
    if not routed:
        return best
    shifts = {name: 0.0 for name in routing.SHIFTS}
    for _ in range(2):
        for name in routing.SHIFTS:
            for value in SHIFT_GRID:
                trial = dict(shifts, **{name: value})
                for share in SHARES:  # the base share moves with the shifts
                    cand = Setting(best.function, share, tuple(trial.items()), best.collapse, best.rrf_k)
                    v = objective(sets, cand)
                    if v > best_value + MIN_GAIN:
                        best, best_value, shifts = cand, v, trial
    return best


# -- the report ---------------------------------------------------------------------------------

def _fmt(m: tuple[float, float, float]) -> str:
    return f"{m[0]:.3f} / {m[1]:.3f} / {m[2]:.3f}"


def mean3(values: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    n = max(len(values), 1)
    return tuple(sum(v[i] for v in values) / n for i in range(3))  # type: ignore[return-value]


def report(sets: dict[str, list[Question]], groups: dict[str, str], commands: dict[str, str],
           routed: bool = True) -> dict[str, Any]:
    """Leave-one-group-out fits, per-set and per-type rows; return them as a dict (and print).
    `routed` False: settings without routing shifts only (function and share)."""
    final = fit(sets, routed)
    err.print(f"fitted on all sets: {final.describe()}")
    held_out: dict[str, Setting] = {}
    for group in sorted(set(groups.values())):
        train = {n: qs for n, qs in sets.items() if groups[n] != group}
        chosen = fit(train, routed) if train else final
        for n in sets:
            if groups[n] == group:
                held_out[n] = chosen
        err.print(f"without {group}: {chosen.describe()}")
    default = default_setting()
    kept, collapsed = replace(default, collapse=False), replace(default, collapse=True)
    baselines = {"keyword": lambda q: q.leg(3), "dense": lambda q: q.leg(1),
                 "RRF 1:1": lambda q: q.fused("rrf", 0.5),
                 "default, copies kept": lambda q: kept.score(q, exact=True),
                 "default, copies collapsed": lambda q: collapsed.score(q, exact=True)}
    rows: dict[str, Any] = {}
    lines = [f"| set | questions | keyword | dense | RRF 1:1 | default ({kept.describe()}) | {collapsed.describe()} | "
             "**held-out CV choice** | chosen on the other sets | fitted on all (in-sample) |",
             "|---|---:|---|---|---|---|---|---|---|---|"]
    type_lines = ["| set | type | questions | keyword | dense | RRF 1:1 | default | copies collapsed | held-out CV choice |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, qs in sets.items():
        per: dict[str, Any] = {}
        for label, f in baselines.items():
            per[label] = [f(q) for q in qs]
        per["held-out"] = [held_out[name].score(q, exact=True) for q in qs]
        per["final"] = [final.score(q, exact=True) for q in qs]
        m = {k: mean3(v) for k, v in per.items()}
        rows[name] = {"questions": len(qs), "command": commands.get(name), "held_out_setting": held_out[name].describe(),
                      **{k: dict(zip(("ndcg_at_10", "recall_at_10", "mrr_at_10"), v)) for k, v in m.items()},
                      "by_type": {}}
        lines.append(f"| {name} | {len(qs)} | {_fmt(m['keyword'])} | {_fmt(m['dense'])} | {_fmt(m['RRF 1:1'])} | "
                     f"{_fmt(m['default, copies kept'])} | {_fmt(m['default, copies collapsed'])} | "
                     f"**{_fmt(m['held-out'])}** | {held_out[name].describe()} | {_fmt(m['final'])} |")
        for t in evaluation.QUERY_TYPES:
            idx = [i for i, q in enumerate(qs) if q.type == t]
            if not idx:
                continue
            tm = {k: mean3([v[i] for i in idx]) for k, v in per.items()}
            rows[name]["by_type"][t] = {"questions": len(idx), **{k: v[0] for k, v in tm.items()}}
            type_lines.append(f"| {name} | {t} | {len(idx)} | {tm['keyword'][0]:.3f} | {tm['dense'][0]:.3f} | "
                              f"{tm['RRF 1:1'][0]:.3f} | {tm['default, copies kept'][0]:.3f} | "
                              f"{tm['default, copies collapsed'][0]:.3f} | {tm['held-out'][0]:.3f} |")
    print("nDCG@10 / Recall@10 / MRR@10, legs cut at 50 (a top_k=10 search), document level\n")
    print("\n".join(lines))
    print("\nnDCG@10 per question type\n")
    print("\n".join(type_lines))
    print(f"\nFitted on all sets (the defaults): {final.describe()}")
    copies = copies_at_default(sets, groups)
    print(f"\nCopies collapsed or kept at the default fusion ({default.describe()}): fitted on all: {copies['all']}; "
          + "; ".join(f"without {g}: {c}" for g, c in copies["folds"].items()))
    return {"copies_at_default": copies, "final": final.describe(), "final_setting": final.__dict__, "sets": rows}


def losing_questions(name: str, qs: list[Question], setting: Setting) -> list[str]:
    """Lines for the questions of a set where `setting` scores below the better leg alone: each
    order's first six passages as (document, dense rank, keyword rank, cosine, BM25)."""
    out = []
    for q in qs:
        hybrid = setting.score(q, exact=True)[0]
        keyword, dense = q.leg(3, setting.collapse)[0], q.leg(1, setting.collapse)[0]
        if hybrid >= max(keyword, dense) - 1e-9:
            continue
        cands = q.variants[setting.collapse]
        out.append(f"{name} {q.id}: hybrid {hybrid:.3f}, keyword {keyword:.3f}, dense {dense:.3f}: {q.question!r}; "
                   f"relevant {q.grades}")
        legs = {label: [i for _, i in sorted((c[k], i) for i, c in enumerate(cands) if c[k])]
                for label, k in (("keyword", 3), ("dense", 1))}
        legs["hybrid"] = q.order(setting.function, setting.share_for(q), collapse=setting.collapse,
                                 rrf_k=setting.rrf_k)
        for label, order in legs.items():
            top = [(q.variant_keys[setting.collapse][i][0], cands[i][1], cands[i][3], round(cands[i][0] or 0, 3),
                    round(cands[i][2] or 0, 2)) for i in order[:6]]
            out.append(f"    {label:8s} {top}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", help="only this set (repeatable)")
    parser.add_argument("--candidates", type=Path, help="write every question's candidates here (JSON)")
    parser.add_argument("--from-candidates", type=Path, action="append",
                        help="read the candidates from here (repeatable); no database")
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--no-routing", action="store_true", help="fit settings without routing shifts only")
    parser.add_argument("--questions", action="append", default=[],
                        help="print this set's questions where the default scores below the better leg (repeatable)")
    args = parser.parse_args(argv)
    specs = [s for s in all_sets() if not args.only or s.name in args.only]
    if args.from_candidates:
        data = {"sets": {}, "groups": {}, "commands": {}}
        for path in args.from_candidates:  # several files: their sets together
            more = json.loads(path.read_text(encoding="utf-8"))
            for key in data:
                data[key].update(more[key])
    else:
        home = Settings.from_env().home
        m = metis_pg.connect()
        data = {"sets": {}, "groups": {}, "commands": {}}
        for spec in specs:
            try:
                m.base(spec.base_name)
            except metis_pg.BaseNotFound:
                err.print(f"{spec.name}: base {spec.base_name!r} not indexed, skipped")
                continue
            t0 = time.perf_counter()
            data["sets"][spec.name] = collect(m, spec, spec.load(home))
            data["groups"][spec.name] = spec.base_name
            data["commands"][spec.name] = spec.command
            err.print(f"{spec.name}: {len(data['sets'][spec.name])} questions, {time.perf_counter() - t0:.0f} s")
            if args.candidates:
                args.candidates.write_text(json.dumps(data, ensure_ascii=False) + "\n", encoding="utf-8")
    sets = {n: [Question(q) for q in qs] for n, qs in data["sets"].items() if not args.only or n in args.only}
    result = report(sets, {n: data["groups"][n] for n in sets}, data["commands"], routed=not args.no_routing)
    for name in args.questions:
        print(f"\nQuestions of {name} where the default ({default_setting().describe()}) is below the better leg\n")
        print("\n".join(losing_questions(name, sets[name], default_setting())) or "(none)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
