"""Search time on a base written in many small transactions, before and after the indexer's table upkeep.

A CLI command's embedded server lives seconds, so autovacuum (which looks once a minute) never
analyzes nor vacuums a base ``metis index`` writes: the planner has no statistics (``reltuples``
-1) and ``bm25_terms`` holds one dead row version per common term per batch.
:func:`metis_pg.storage.maintain` (run by the indexer after each phase that wrote) does what
autovacuum would. This benchmark, in ONE run on a throwaway embedded server with autovacuum
off (a server that never lives a minute):

1. writes ``--chunks`` made-up chunks (``search_latency.py``'s Zipf corpus and loader, the real
   ``storage.write_documents``) one document per transaction (``metis index --batch 1``);
2. times the keyword leg and the fused statement (``run_search``, top_k 10) on ``--queries``
   Zipf queries, the two cases in turn query by query, within ``--budget-s`` seconds per case
   (at least 5 queries; a statement stopped by ``statement_timeout_s``, 30 s, counts as a
   timeout at the time it took): **before**;
3. times ``storage.maintain(pool)`` (which tables, ANALYZE / VACUUM, seconds each);
4. times the same queries again: **after**;
5. writes one more document and times ``storage.maintain`` again: the cost of a small run.

Prints JSON (and writes it with ``--json PATH``): the table counts before and after, the
percentiles, the upkeep, ``load_avg`` at start and end.

Usage::

    python benchmarks/planner_statistics.py                       # 5,000 chunks
    python benchmarks/planner_statistics.py --chunks 20000 --json out.json
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import search_latency as sl  # noqa: E402  (the corpus, the loader, the queries)
from metis_pg import db, migrate, storage  # noqa: E402
from metis_pg.config import BaseSpec, Settings  # noqa: E402
from metis_pg.errors import DatabaseUnavailable  # noqa: E402
from metis_pg.retrieval import Filters, run_search  # noqa: E402

TABLES_SQL = """
SELECT s.relname, c.reltuples, s.n_live_tup, s.n_dead_tup, s.last_analyze IS NOT NULL, s.last_vacuum IS NOT NULL
FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.relname IN ('documents', 'chunks', 'posting_blocks', 'block_lengths', 'bm25_terms', 'embeddings')
ORDER BY 1
"""


def tables(pool) -> dict[str, dict]:
    with pool.connection() as conn:
        return {r[0]: {"reltuples": r[1], "live": r[2], "dead": r[3], "analyzed": r[4], "vacuumed": r[5]}
                for r in conn.execute(TABLES_SQL)}


def time_cases(pool, corpus: sl.Corpus, queries, budget_s: float) -> dict:
    """Keyword leg and fused statement, in turn query by query; p50/p95/max (ms) and n."""

    def run(q, dense: bool):
        with pool.connection() as conn:
            return run_search(conn, base_ids=[corpus.base_id], model=corpus.model,
                              query_embedding=q.vector if dense else None, terms=q.terms,
                              top_k=sl.TOP_K, filters=Filters())

    samples: dict[str, list[float]] = {"keyword": [], "fused": []}
    timeouts = {"keyword": 0, "fused": 0}
    started = time.perf_counter()
    for i, q in enumerate(queries):
        for name, dense in (("keyword", False), ("fused", True)):
            t0 = time.perf_counter()
            try:
                run(q, dense)
            except DatabaseUnavailable as exc:  # statement_timeout_s (30 s): counted at the time it took
                if "statement_timeout_s" not in str(exc):
                    raise
                timeouts[name] += 1
            samples[name].append((time.perf_counter() - t0) * 1000.0)
        if i + 1 >= 5 and time.perf_counter() - started > 2 * budget_s:
            break
    return {name: {**sl.percentiles(s), "max_ms": max(s), "timeouts": timeouts[name]} for name, s in samples.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--budget-s", type=float, default=60.0, help="seconds per case at most (before and after)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    report: dict = {"command": "python benchmarks/planner_statistics.py " + " ".join(argv or sys.argv[1:]),
                    "git_commit": sl.git_commit(), "machine": sl.machine(), "load_avg": {"start": sl.load_avg()}}
    home = Path(tempfile.mkdtemp(prefix="metis-bench-stats-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    dsn = db.embedded_dsn(home / "pgdata")
    settings = Settings.from_env()
    migrate.upgrade(dsn, settings=settings)
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:  # a server that never lives autovacuum's minute
        conn.execute("ALTER SYSTEM SET autovacuum = off")
        conn.execute("SELECT pg_reload_conf()")
    pool = db.open_pool(dsn, max_size=2, settings=settings)
    try:
        w = sl.Words.make()
        corpus = sl.create_corpus(pool, BaseSpec())
        report["load"] = sl.load_base(pool, corpus, args.chunks, w, "zipf", rng, batch_chunks=1, keep_vectors=False)
        queries = sl.zipf_queries(rng, args.queries, w, corpus)
        report["tables_before"] = tables(pool)
        report["before"] = time_cases(pool, corpus, queries, args.budget_s)
        done = storage.maintain(pool)
        report["upkeep"] = {"seconds": done.seconds, "analyzed": done.analyzed, "vacuumed": done.vacuumed,
                            "per_table_s": dict(done.per_table), "warnings": done.warnings}
        report["tables_after"] = tables(pool)
        report["after"] = time_cases(pool, corpus, queries, args.budget_s)
        sl.load_base(pool, corpus, 5, w, "zipf", rng, batch_chunks=1, keep_vectors=False)  # one small document
        small = storage.maintain(pool)
        report["upkeep_small_run"] = {"seconds": small.seconds, "analyzed": small.analyzed, "vacuumed": small.vacuumed}
    finally:
        pool.close()
    report["load_avg"]["end"] = sl.load_avg()
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
