"""Indexing without model time, split into the client's CPU and the server's: chunks per CPU-second.

Writes ``--chunks`` chunks of ~1,000 characters (``search_latency.realish_text``, documents of 10
chunks, titles and headings, random unit vectors given) through ``storage.write_documents`` into a
new base of a throwaway embedded PostgreSQL, in transactions of each ``--batch`` size in turn (a
new base each), and prints per batch size:

- wall time and chunks/s (what ``search_latency.py``'s ``indexing_chunks_per_s`` measures);
- the client's CPU (``time.process_time``; of it, tokenizing: building the ``PendingDocument``s);
- the server backend's CPU (``/proc/<pid>/schedstat`` of the one connection, Linux only);
- chunks per CPU-second of both together;
- the CPU of the thread that tokenizes (``reader_cpu_s``) and of the rest, the writer's thread and
  the server one after the other (``writer_path_cpu_s``): on the indexer's path the two run at
  once, so on two free cores the wall time is about the larger of the two.

With ``--indexer`` each batch size is measured twice: as above (``path`` ``write_documents``: one
``storage.write_documents`` after the other), and through the indexer's own batches
(``metis_pg.indexing.run.Batch``, ``path`` ``indexer``: documents tokenized and added one by one,
the batch written as ``metis index`` writes it, which since issue 24 is while the next documents
are tokenized). The indexer's batch size is set to ``--batch`` for the measure.

On a machine shared with other work the wall time follows the load; the CPU seconds much less
(they still grow with it: caches and hyper-threads are shared), so compare figures of one run.

Usage::

    python benchmarks/ingest_cpu.py                         # 10,000 chunks, batches of 500 and 2,000
    python benchmarks/ingest_cpu.py --chunks 5000 --batch 500 1000 2000 --json out.json
    python benchmarks/ingest_cpu.py --batch 2000 --indexer  # also through the indexer's batches
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import search_latency as sl  # noqa: E402  (the benchmark's corpus and helpers)

from metis_pg import db, migrate, storage  # noqa: E402
from metis_pg.config import BaseSpec, Settings  # noqa: E402


def backend_cpu_s(pid: int) -> float:
    """CPU seconds the process `pid` has run (``/proc/<pid>/schedstat``, nanoseconds)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def documents(n_chunks: int, rng: np.random.Generator, w: sl.Words) -> list[tuple]:
    """``(meta, chunks, vectors)`` of ``n_chunks // 10`` documents, as ``search_latency.indexing_throughput``."""
    out = []
    for d in range(max(1, n_chunks // 10)):
        chunks, offset = [], 0
        for ordinal in range(10):
            text = sl.realish_text(rng, w.words, w.cdf, 1000)
            chunks.append(sl.Chunk(ordinal=ordinal, text=text, title=f"Report {d}",
                                   headings=(f"Section {ordinal // 3 + 1}",), page=None, line=1 + 6 * ordinal,
                                   char_start=offset, char_end=offset + len(text)))
            offset += len(text) + 2
        meta = storage.DocumentMeta(f"reports/report-{d:05d}.md", f"Report {d}", "md", f"h{d}", offset)
        out.append((meta, chunks, list(sl.unit_vectors(rng, len(chunks)))))
    return out


def measure(pool, docs: list[tuple], batch_chunks: int, indexer: bool = False) -> dict:
    """Write `docs` into a new base in transactions of `batch_chunks` chunks; return the figures.

    `indexer`: through ``metis_pg.indexing.run.Batch`` (its chunk limit set to `batch_chunks` meanwhile),
    else by ``storage.write_documents`` calls one after the other.
    """
    corpus = sl.create_corpus(pool, BaseSpec(), "bench-ingest")
    with pool.connection() as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    per_batch = max(1, batch_chunks // 10)
    chunks = sum(len(c) for _, c, _ in docs)
    server0, client0, wall0, tokenize = backend_cpu_s(pid), time.process_time(), time.perf_counter(), 0.0
    reader0 = time.thread_time()
    if indexer:
        from metis_pg.indexing import run as indexing_run

        limit, indexing_run.BATCH_CHUNKS = indexing_run.BATCH_CHUNKS, batch_chunks
        try:
            batch = indexing_run.Batch(pool, corpus.base_id, corpus.source_id, corpus.model,
                                       indexing_run.Run(base=corpus.name, base_id=corpus.base_id),
                                       max_documents=per_batch)
            for m, c, v in docs:
                t = time.thread_time()  # this thread's CPU: the writes may run in another
                document = storage.PendingDocument(m, c, v)  # tokenizes
                tokenize += time.thread_time() - t
                batch.add(document)
            batch.write()
        finally:
            indexing_run.BATCH_CHUNKS = limit
    else:
        for i in range(0, len(docs), per_batch):
            t = time.process_time()
            batch = [storage.PendingDocument(m, c, v) for m, c, v in docs[i:i + per_batch]]  # tokenizes
            tokenize += time.process_time() - t
            with pool.connection() as conn:
                if conn.execute("SELECT pg_backend_pid()").fetchone()[0] != pid:
                    raise RuntimeError("the pool gave another connection: its server CPU would not be counted")
                storage.write_documents(conn, base_id=corpus.base_id, source_id=corpus.source_id, documents=batch,
                                        model=corpus.model)
    wall, client, server = (time.perf_counter() - wall0, time.process_time() - client0,
                            backend_cpu_s(pid) - server0)
    reader = time.thread_time() - reader0
    with pool.connection() as conn:
        if conn.execute("SELECT pg_backend_pid()").fetchone()[0] != pid:
            raise RuntimeError("the pool gave another connection: its server CPU would not be counted")
        storage.drop_base(conn, corpus.name)
    return {"batch_chunks": batch_chunks, "chunks": chunks, "wall_s": round(wall, 2),
            "chunks_per_s": round(chunks / wall), "client_cpu_s": round(client, 2),
            "tokenize_cpu_s": round(tokenize, 2), "server_cpu_s": round(server, 2),
            "chunks_per_cpu_s": round(chunks / (client + server)), "load_avg": round(os.getloadavg()[0], 2),
            "path": "indexer" if indexer else "write_documents",
            # This thread's CPU (tokenizing; on the indexer's path also encoding the postings); the rest
            # of the client's ran in the writer's thread, one after the other with the server's work:
            # with two free cores the wall time is about the larger of the two paths.
            "reader_cpu_s": round(reader, 2), "writer_path_cpu_s": round(client - reader + server, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--batch", type=int, nargs="+", default=[500, 2000], help="chunks per transaction")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--indexer", action="store_true",
                        help="also measure each batch size through the indexer's batches (metis_pg.indexing.run.Batch)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    settings = Settings.from_env()
    dsn = db.embedded_dsn(Path(tempfile.mkdtemp(prefix="metis-ingest-", dir="/var/tmp")) / "pgdata")
    migrate.upgrade(dsn, settings=settings)
    pool = db.open_pool(dsn, max_size=1, settings=settings)
    docs = documents(args.chunks, np.random.default_rng(args.seed), sl.Words.make())
    results = []
    for batch, indexer in [(b, i) for b in args.batch for i in ((False, True) if args.indexer else (False,))]:
        r = measure(pool, docs, batch, indexer)
        results.append(r)
        print(f"batch {r['batch_chunks']:5d} {r['path']:>15}: {r['chunks_per_s']:5d} chunks/s ({r['wall_s']} s wall); "
              f"CPU client "
              f"{r['client_cpu_s']} s (tokenizing {r['tokenize_cpu_s']}), server {r['server_cpu_s']} s: "
              f"{r['chunks_per_cpu_s']} chunks per CPU-second; reader thread {r['reader_cpu_s']} s, writer thread + "
              f"server {r['writer_path_cpu_s']} s; load {r['load_avg']}", flush=True)
    pool.close()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
