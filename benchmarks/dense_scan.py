"""Where the exact dense scan's time goes: reading the rows vs computing the distances.

On a table of N random unit vectors (384 dimensions, as the bundled model's), in a throwaway
embedded PostgreSQL (or ``--dsn``), each timed as the median of ``--repeat`` runs:

- ``count(*)``: the sequential scan alone (every row read, no distance);
- the exact top 50 by cosine distance (``<=>``, what the dense leg computes) and by negative
  inner product (``<#>``, equal ranking for unit vectors), for ``halfvec`` (what metis_pg stores)
  and ``vector`` (float32);
- each with ``max_parallel_workers_per_gather`` 0, 1 and 2 (on two cores: one process, two, three);
- numpy on the same float16 values as a float32 matrix, for scale;
- the row's width: the same halfvec top 50 on a table with the columns of metis_pg's
  ``embeddings`` (chunk_id, model, base_id, document_id, embedding, text_hash) and its filters
  (base, model), and on a narrow table with the vector first (embedding, id);
- the sum of the cosine distances (no sort) over the 384 dimensions and of the inner products over
  the 33 of the bound table: what pgvector's halfvec kernel costs per dimension and per call;
- what an exact pruned scan would pay at least: the top 200 by a 33-dimension "bound vector"
  (the first 32 dimensions and the norm of the other 352, one ``<#>`` per row: its inner product
  with (q[:32], |q[32:]|) is the Cauchy-Schwarz bound of the full one), and a sum over the rows
  of a float8 expression (what any bound written in SQL costs per row);

then prints ``EXPLAIN (ANALYZE, BUFFERS)`` of the halfvec cosine scan (shared hits vs reads).

Usage::

    python benchmarks/dense_scan.py                 # 100,000 vectors
    python benchmarks/dense_scan.py --rows 20000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psycopg
from pgvector import HalfVector, Vector
from pgvector.psycopg import register_vector

try:
    import metis_pg  # noqa: F401
except ImportError:  # a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from metis_pg import db

DIM = 384


def median_ms(run, repeat: int) -> float:
    run()  # warm
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--dsn", help="PostgreSQL URL with pgvector (default: a throwaway embedded server)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    dsn = args.dsn or db.embedded_dsn(Path(tempfile.mkdtemp(prefix="metis-dense-", dir="/var/tmp")) / "pgdata")
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((args.rows, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors.astype(np.float16).astype(np.float32)
    query = vectors[0] + rng.standard_normal(DIM, dtype=np.float32) * 0.1
    query /= np.linalg.norm(query)
    figures: dict = {"rows": args.rows, "load_avg_start": os.getloadavg()[0]}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(conn)
        conn.execute("DROP TABLE IF EXISTS dense_scan_half, dense_scan_full, dense_scan_wide, dense_scan_first,"
                     " dense_scan_bound")
        conn.execute(f"CREATE TABLE dense_scan_half (id bigint, embedding halfvec({DIM}))")
        conn.execute(f"CREATE TABLE dense_scan_full (id bigint, embedding vector({DIM}))")
        for table, kind in (("dense_scan_half", HalfVector), ("dense_scan_full", Vector)):
            conn.execute(f"ALTER TABLE {table} ALTER COLUMN embedding SET STORAGE PLAIN")
            with conn.cursor().copy(f"COPY {table} (id, embedding) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int8", "halfvec" if kind is HalfVector else "vector"])
                for i, v in enumerate(vectors):
                    copy.write_row((i, kind(v)))
            conn.execute(f"VACUUM ANALYZE {table}")
        conn.execute(f"CREATE TABLE dense_scan_wide (chunk_id bigint, model text, base_id int, document_id bigint,"
                     f" embedding halfvec({DIM}), text_hash bigint)")
        conn.execute(f"CREATE TABLE dense_scan_first (embedding halfvec({DIM}), id bigint)")
        conn.execute("CREATE TABLE dense_scan_bound (id bigint, bound halfvec(33))")
        with conn.cursor().copy("COPY dense_scan_wide FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "text", "int4", "int8", "halfvec", "int8"])
            for i, v in enumerate(vectors):
                copy.write_row((i, "bench:384", 1, i // 10, HalfVector(v), i))
        with conn.cursor().copy("COPY dense_scan_first FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["halfvec", "int8"])
            for i, v in enumerate(vectors):
                copy.write_row((HalfVector(v), i))
        with conn.cursor().copy("COPY dense_scan_bound FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "halfvec"])
            for i, v in enumerate(vectors):
                copy.write_row((i, HalfVector(np.append(v[:32], np.linalg.norm(v[32:])))))
        for table in ("dense_scan_wide", "dense_scan_first", "dense_scan_bound"):
            conn.execute(f"VACUUM ANALYZE {table}")
        figures["mb"] = {t: round(conn.execute("SELECT pg_total_relation_size(%s) / 1e6::float8", (t,)).fetchone()[0], 1)
                         for t in ("dense_scan_half", "dense_scan_full")}
        cases = {}
        for workers in (0, 1, 2):
            conn.execute(f"SET max_parallel_workers_per_gather = {workers}")
            for table, kind in (("dense_scan_half", HalfVector), ("dense_scan_full", Vector)):
                q = kind(query)
                cases[f"{table} count(*) workers={workers}"] = median_ms(
                    lambda t=table: conn.execute(f"SELECT count(*) FROM {t}").fetchone(), args.repeat)
                for op, name in (("<=>", "cosine"), ("<#>", "inner")):
                    cases[f"{table} top50 {name} workers={workers}"] = median_ms(
                        lambda t=table, o=op, q=q: conn.execute(
                            f"SELECT id FROM {t} ORDER BY embedding {o} %s LIMIT 50", (q,)).fetchall(), args.repeat)
            q = HalfVector(query)
            cases[f"dense_scan_wide top50 cosine, base and model filters workers={workers}"] = median_ms(
                lambda q=q: conn.execute(
                    "SELECT chunk_id FROM dense_scan_wide WHERE base_id = ANY('{1}'::int[]) AND model = 'bench:384'"
                    " ORDER BY embedding <=> %s, chunk_id LIMIT 50", (q,)).fetchall(), args.repeat)
            cases[f"dense_scan_first (vector first) top50 cosine workers={workers}"] = median_ms(
                lambda q=q: conn.execute(
                    "SELECT id FROM dense_scan_first ORDER BY embedding <=> %s, id LIMIT 50", (q,)).fetchall(),
                args.repeat)
            bound_query = HalfVector(np.append(query[:32], np.linalg.norm(query[32:])))
            cases[f"dense_scan_bound count(*) workers={workers}"] = median_ms(
                lambda: conn.execute("SELECT count(*) FROM dense_scan_bound").fetchone(), args.repeat)
            cases[f"dense_scan_bound top200 by 33-dim bound workers={workers}"] = median_ms(
                lambda b=bound_query: conn.execute(
                    "SELECT id FROM dense_scan_bound ORDER BY bound <#> %s LIMIT 200", (b,)).fetchall(), args.repeat)
            cases[f"dense_scan_half sum(id * 0.5 + 1) (a float8 expression per row) workers={workers}"] = median_ms(
                lambda: conn.execute("SELECT sum(id * 0.5::float8 + 1) FROM dense_scan_half").fetchone(), args.repeat)
            # The distance alone, no sort: its cost per row over the 384 and the 33 dimensions gives
            # pgvector's cost per dimension (its halfvec kernel) and per call.
            cases[f"dense_scan_half sum(cosine distance) workers={workers}"] = median_ms(
                lambda q=q: conn.execute("SELECT sum(embedding <=> %s) FROM dense_scan_half", (q,)).fetchone(),
                args.repeat)
            cases[f"dense_scan_bound sum(33-dim inner product) workers={workers}"] = median_ms(
                lambda b=bound_query: conn.execute("SELECT sum(bound <#> %s) FROM dense_scan_bound", (b,)).fetchone(),
                args.repeat)

        def numpy_top() -> None:
            scores = vectors @ query
            np.argpartition(-scores, 50)[:50]

        cases["numpy float32 matrix @ query, top 50"] = median_ms(numpy_top, args.repeat)
        figures["median_ms"] = {k: round(v, 2) for k, v in cases.items()}
        conn.execute("SET max_parallel_workers_per_gather = 2")
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT id FROM dense_scan_half ORDER BY embedding <=> %s LIMIT 50",
            (HalfVector(query),)))
        conn.execute("DROP TABLE dense_scan_half, dense_scan_full, dense_scan_wide, dense_scan_first, dense_scan_bound")
    figures["load_avg_end"] = os.getloadavg()[0]
    for name, ms in figures["median_ms"].items():
        print(f"{ms:9.2f} ms  {name}")
    print(f"sizes MB: {figures['mb']}; load average {figures['load_avg_start']:.2f} -> {figures['load_avg_end']:.2f}")
    print(plan.split("'[")[0] if "'[" in plan else plan)
    print("\n".join(line for line in plan.splitlines() if "Buffers" in line or "Execution" in line or "Workers" in line))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
