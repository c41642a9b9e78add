"""What read routing costs a search: the primary alone, a replica, a replica with ``consistent=True``.

Starts an embedded PostgreSQL (the primary) in a temporary folder, makes a streaming
standby of it (``metis_pg.replicas.create_standby``: pg_basebackup -R with a slot),
indexes a small made-up corpus (the one of ``benchmarks/http_load.py``) on the
primary, waits for the standby to replay it, then times ``Metis.search`` (keyword
mode: no model in the way) one after the other, in turns, for three setups:

- ``primary``: a Metis without replicas;
- ``replica``: a Metis whose reads go to the standby (``read_dsns=[standby]``);
- ``replica, consistent``: the same with ``consistent=True`` (the primary's WAL
  position is read first, and the standby must have replayed it).

Prints p50 / p95 / mean in ms per setup and the load average before and after.
Every search also counts itself on the primary (SPEC F20), in every setup.

Usage::

    python benchmarks/replica_routing.py                 # 300 searches per setup
    python benchmarks/replica_routing.py --searches 1000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from metis_pg.config import Settings
import metis_pg
from metis_pg import db, migrate, replicas
from metis_pg.db import embedded

sys.path.insert(0, str(Path(__file__).resolve().parent))
from http_load import QUESTIONS, percentile, wait_for_replay, write_corpus  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--searches", type=int, default=300, help="timed searches per setup (10-100000)")
    parser.add_argument("--documents", type=int, default=12, help="documents in the corpus (2 chunks each)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if not 10 <= args.searches <= 100_000:
        parser.error("--searches must be 10-100000 (a bounded run)")

    scratch = Path(tempfile.mkdtemp(prefix="metis-replica-routing-", dir="/var/tmp"))
    standby_folder = scratch / "standby"
    try:
        primary = db.embedded_dsn(scratch / "pgdata")
        migrate.upgrade(primary, settings=Settings.from_env())
        t0 = time.perf_counter()
        standby = replicas.create_standby(primary, standby_folder)
        made_s = time.perf_counter() - t0
        corpus = scratch / "corpus"
        corpus.mkdir()
        write_corpus(corpus, args.documents)
        alone, routed = metis_pg.Metis(primary), metis_pg.Metis(primary, read_dsns=[standby])
        setups = {"primary": (alone, False), "replica": (routed, False), "replica, consistent": (routed, True)}
        try:
            report = setups["primary"][0].index("bench", corpus, batch_documents=args.documents)
            wait_for_replay(primary, standby)
            for m, consistent in setups.values():  # warm: pools, the first lag measurement
                m.search("bench", QUESTIONS[0], mode="keyword", consistent=consistent)
            load_before = _load()
            times: dict[str, list[float]] = {name: [] for name in setups}
            warnings: dict[str, int] = {name: 0 for name in setups}
            for i in range(args.searches):
                for name, (m, consistent) in setups.items():
                    t = time.perf_counter()
                    answer = m.search("bench", QUESTIONS[i % len(QUESTIONS)], mode="keyword", consistent=consistent)
                    times[name].append((time.perf_counter() - t) * 1000)
                    warnings[name] += bool(answer.warnings)
            load_after = _load()
        finally:
            alone.close()
            routed.close()
        figures = {name: {"p50_ms": round(statistics.median(v), 2), "p95_ms": round(percentile(v, 95), 2),
                          "mean_ms": round(statistics.fmean(v), 2), "searches": len(v),
                          "answers_with_warnings": warnings[name]} for name, v in times.items()}
        print(f"standby made in {made_s:.1f} s; {report.chunks} chunks; {args.searches} keyword searches per setup")
        for name, f in figures.items():
            print(f"{name:20s} p50 {f['p50_ms']:6.2f} · p95 {f['p95_ms']:6.2f} · mean {f['mean_ms']:6.2f} ms · "
                  f"answers with a warning {f['answers_with_warnings']}")
        command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
        machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        print(f"command: {command}")
        print(f"machine: {machine}; load before: {load_before}; after: {load_after}")
        if args.json:
            Path(args.json).write_text(json.dumps({"command": command, "machine": machine, "load_before": load_before,
                                                   "load_after": load_after, "figures": figures}, indent=2))
        return 1 if any(warnings.values()) else 0
    finally:
        replicas.remove_standby(standby_folder, settings=Settings.from_env())
        server = embedded._servers.pop((scratch / "pgdata").resolve(), None)
        if server is not None:
            server.cleanup()
        shutil.rmtree(scratch, ignore_errors=True)


def _load() -> str:
    """The 1, 5 and 15 minute load averages (what ``uptime`` prints)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
