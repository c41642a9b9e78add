"""One node vs Citus, same data, same run: a base's hybrid search, indexing two bases at once, 3 bases.

::

    python benchmarks/citus_scaling.py --citus-url postgresql://postgres@127.0.0.1:9700/metis \
        [--dsn ONE_NODE_URL] [--chunks 30000] [--index-chunks 15000] [--queries 40] [--json out.json]

``--citus-url`` is a Citus coordinator whose metis schema is distributed by base_id (the steps
of docs/scaling.md: ``metis db upgrade``, ``sql/citus/keys.sql``, ``sql/citus/distribute.sql``);
the one node is ``--dsn`` or a throwaway embedded server. On each, with the same made-up data
(the generator of benchmarks/search_latency.py, same seeds, written through
``storage.write_documents``):

1. base 1 of ``--chunks`` chunks is loaded, then the fused statement (``sql/search/hybrid.sql``,
   both legs, top_k 10, via :func:`metis_pg.retrieval.run_search`) is timed on it, query by
   query on both targets in turn (p50/p95 ms);
2. two bases of ``--index-chunks`` chunks each are written at once by two threads (on Citus,
   two bases placed on different workers): wall seconds and chunks/s;
3. a search over the three bases as the search pipeline runs it (one statement per base at
   once, fused: :func:`metis_pg.retrieval.fuse_bases`), and as one statement over the three
   (on Citus that one is refused: the error is reported).

With ``--baseline GIT_REV`` one base's hybrid statement as it was at that revision is timed too,
in turn with the others (on Citus inlined as today: what a search ran then).

Prints a table and writes the figures (with ``load_avg``, the Citus version, the commit) as JSON.
All nodes of a loopback cluster share this machine's cores: what it shows is the cost of
distribution, not the gain of more machines.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import search_latency as sl  # noqa: E402  (the generator and helpers of the one-node benchmark)

from metis_pg.config import Settings  # noqa: E402
from metis_pg import db, migrate, retrieval, sqlfiles, storage  # noqa: E402
from metis_pg.config import BaseSpec  # noqa: E402
from metis_pg.retrieval import Filters, fuse_bases, leg_limit, run_search  # noqa: E402


def worker_of(pool: db.Pool, base_id: int) -> str | None:
    """The node holding `base_id`'s shard of documents (host:port), or None on one node."""
    with pool.connection() as conn:
        if conn.execute("SELECT to_regclass('pg_dist_partition') IS NULL").fetchone()[0]:
            return None
        row = conn.execute(
            "SELECT n.nodename || ':' || n.nodeport FROM pg_dist_placement AS p JOIN pg_dist_node AS n USING (groupid)"
            " WHERE p.shardid = get_shard_id_for_distribution_column('documents', %s)", (base_id,)).fetchone()
        return row[0]


def two_bases_apart(pool: db.Pool, spec: BaseSpec) -> list[sl.Corpus]:
    """Two new bases; on Citus two whose shards are on different workers (others made on the way are dropped)."""
    made = [sl.create_corpus(pool, spec, "cit-index")]
    first = worker_of(pool, made[0].base_id)
    while True:
        c = sl.create_corpus(pool, spec, "cit-index")
        if first is None or worker_of(pool, c.base_id) != first or len(made) > 20:
            chosen = [made[0], c]
            break
        made.append(c)
    with pool.connection() as conn:
        for extra in made[1:]:
            storage.drop_base(conn, extra.name)
    return chosen


def statement_at(revision: str, citus: bool) -> str:
    """The hybrid statement as it was at git `revision` (``--baseline``): ``sql/search/hybrid.sql`` then,
    on Citus with the keyword leg's and the complete scores' statements inlined as
    :func:`metis_pg.retrieval.hybrid_statement` inlines them (``sql/citus/complete_scores.sql`` then)."""
    root = Path(__file__).resolve().parents[1]

    def show(path: str) -> str:
        return subprocess.run(["git", "show", f"{revision}:{path}"], cwd=root, check=True, capture_output=True,
                              text=True).stdout

    hybrid = show("sql/search/hybrid.sql")
    if not citus:
        return hybrid
    keyword = retrieval._function_body(sqlfiles.load("search/bm25_top_k.v5"), "bm25_top_k",
                                       retrieval._KEYWORD_ARGUMENTS)
    hybrid = retrieval._inline_call(hybrid, "bm25_top_k", "k", keyword)
    complete = show("sql/citus/complete_scores.sql").rstrip().rstrip(";")
    return retrieval._inline_call(hybrid, "bm25_chunk_scores", "m", complete)


def fused(pool: db.Pool, model: str, q: sl.Query, base_ids: list[int], statement: str | None = None):
    with pool.connection() as conn:
        return run_search(conn, base_ids=base_ids, model=model, query_embedding=q.vector, terms=q.terms,
                          top_k=sl.TOP_K, filters=Filters(), statement=statement)


def per_base(pool: db.Pool, executor: ThreadPoolExecutor, model: str, q: sl.Query, base_ids: list[int]):
    def one(b: int):
        with pool.connection() as conn:
            return run_search(conn, base_ids=[b], model=model, query_embedding=q.vector, terms=q.terms,
                              top_k=2 * leg_limit(sl.TOP_K), legs_top_k=sl.TOP_K, filters=Filters())

    answers = list(executor.map(one, base_ids))
    return fuse_bases([a for a, _ in answers], legs_top_k=sl.TOP_K, top_k=sl.TOP_K, rrf_k=60, dense_weight=1.0,
                      keyword_weight=1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--citus-url", required=True, help="the Citus coordinator (schema distributed by base_id)")
    parser.add_argument("--dsn", help="the one node (default: a throwaway embedded server)")
    parser.add_argument("--chunks", type=int, default=30_000, help="chunks of base 1 (searched)")
    parser.add_argument("--index-chunks", type=int, default=15_000, help="chunks of each of the two bases indexed at once")
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--baseline", metavar="GIT_REV",
                        help="also time one base's hybrid statement as it was at this revision, on both")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    report: dict = {"command": "python benchmarks/citus_scaling.py " + " ".join(
        shlex.quote(a) for a in (argv or sys.argv[1:])), "git_commit": sl.git_commit(), "machine": sl.machine(),
        "load_avg": {"start": sl.load_avg()}, "chunks": args.chunks, "index_chunks": args.index_chunks}
    one_dsn = args.dsn
    home = None
    if one_dsn is None:
        home = Path(tempfile.mkdtemp(prefix="metis-citus-bench-"))
        one_dsn = db.embedded_dsn(home / "pgdata")
    migrate.upgrade(one_dsn, settings=Settings.from_env())
    targets = {"one node": one_dsn, "citus": args.citus_url}
    pools = {name: db.open_pool(url, max_size=4, settings=Settings.from_env()) for name, url in targets.items()}
    with pools["citus"].connection() as conn:
        report["citus_version"] = conn.execute("SELECT citus_version()").fetchone()[0]
        distributed = conn.execute("SELECT count(*) FROM pg_dist_partition WHERE logicalrelid = 'chunks'::regclass"
                                   " AND partmethod = 'h'").fetchone()[0]
    if not distributed:
        print("the Citus schema is not distributed: run sql/citus/keys.sql and distribute.sql first", file=sys.stderr)
        return 2
    w = sl.Words.make()
    spec = BaseSpec()
    made: dict[str, list[sl.Corpus]] = {name: [] for name in targets}
    figures: dict = {name: {} for name in targets}
    try:
        for name, pool in pools.items():
            corpus = sl.create_corpus(pool, spec, "cit-search")
            made[name].append(corpus)
            load = sl.load_base(pool, corpus, args.chunks, w, "zipf", np.random.default_rng(args.seed),
                                keep_vectors=False, label=f"{name} base 1: ")
            figures[name]["load_chunks_per_s"] = load["load_chunks_per_s"]
            print(f"[{name}: base 1, {args.chunks:,} chunks at {load['load_chunks_per_s']:.0f} chunks/s]",
                  file=sys.stderr)

            pair = two_bases_apart(pool, spec)
            made[name].extend(pair)
            figures[name]["index_workers"] = [worker_of(pool, c.base_id) for c in pair]
            errors: list[BaseException] = []

            def index(c: sl.Corpus, seed: int, pool=pool) -> None:
                try:
                    sl.load_base(pool, c, args.index_chunks, w, "zipf", np.random.default_rng(seed),
                                 keep_vectors=False)
                except BaseException as exc:  # reported below
                    errors.append(exc)

            t0 = time.perf_counter()
            threads = [threading.Thread(target=index, args=(c, args.seed + 1 + i)) for i, c in enumerate(pair)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            if errors:
                raise errors[0]
            figures[name]["index_two_at_once_s"] = wall
            figures[name]["index_two_at_once_chunks_per_s"] = 2 * args.index_chunks / wall
            print(f"[{name}: two bases of {args.index_chunks:,} chunks at once in {wall:.1f} s]", file=sys.stderr)
            sl.vacuum_analyze(targets[name])

        queries = sl.zipf_queries(np.random.default_rng(args.seed + 7), args.queries, w, made["one node"][0])
        executor = ThreadPoolExecutor(max_workers=3)
        cases = {}
        for name, pool in pools.items():
            model = made[name][0].model
            ids = [c.base_id for c in made[name]]
            cases[(name, "one base, hybrid")] = lambda q, p=pool, m=model, i=ids: fused(p, m, q, i[:1])
            cases[(name, "3 bases, a statement per base")] = \
                lambda q, p=pool, m=model, i=ids: per_base(p, executor, m, q, i)
            cases[(name, "3 bases, one statement")] = lambda q, p=pool, m=model, i=ids: fused(p, m, q, i)
            if args.baseline:
                before = statement_at(args.baseline, citus=name == "citus")
                cases[(name, f"one base, hybrid at {args.baseline}")] = \
                    lambda q, p=pool, m=model, i=ids, st=before: fused(p, m, q, i[:1], st)
        samples: dict = {k: [] for k in cases}
        refused: dict = {}
        for i, q in enumerate(queries):
            for key, fn in cases.items():
                if key in refused:
                    continue
                t0 = time.perf_counter()
                try:
                    fn(q)
                except Exception as exc:  # Citus refuses the one statement over bases on several workers
                    refused[key] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                    continue
                if i >= sl.WARMUP_QUERIES:
                    samples[key].append((time.perf_counter() - t0) * 1000)
        for (name, case), values in samples.items():
            figures[name][case] = sl.percentiles(values) if values else {"refused": refused.get((name, case))}
    finally:
        for name, pool in pools.items():
            with pool.connection() as conn:
                for c in made[name]:
                    storage.drop_base(conn, c.name)
            pool.close()
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)
    report["load_avg"]["end"] = sl.load_avg()
    report["figures"] = figures
    print(f"\n{report['citus_version']}; load {report['load_avg']}")
    print(f"  {'case':<34} {'one node p50/p95 ms':>22} {'citus p50/p95 ms':>22}")
    shown = ["one base, hybrid"] + ([f"one base, hybrid at {args.baseline}"] if args.baseline else []) + [
        "3 bases, a statement per base", "3 bases, one statement"]
    for case in shown:
        row = []
        for name in targets:
            f = figures[name][case]
            row.append(f"{f['p50_ms']:8.1f} / {f['p95_ms']:8.1f}" if "p50_ms" in f else "refused")
        print(f"  {case:<34} {row[0]:>22} {row[1]:>22}")
    for name in targets:
        print(f"  {name}: two bases indexed at once: {figures[name]['index_two_at_once_s']:.1f} s"
              f" ({figures[name]['index_two_at_once_chunks_per_s']:.0f} chunks/s) on {figures[name]['index_workers']}")
        for case in ("3 bases, one statement",):
            if "refused" in figures[name][case]:
                print(f"  {name}: {case}: {figures[name][case]['refused']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
