"""The first searches after the embedded postmaster is SIGKILLed (issue 26, item 10).

Starts the embedded PostgreSQL in a temporary folder, indexes 300 small documents
(hashed vectors from a local fake embedding service), searches once per mode,
SIGKILLs the postmaster, waits half a second, then times the next searches: the first one restarts the
server (crash recovery included) and is the figure that matters. Prints each
search's milliseconds and the restart's steps from the server's log.

Usage::

    python benchmarks/postmaster_restart.py            # --rounds 3
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from metis_pg.config import Settings  # noqa: E402
import metis_pg  # noqa: E402
from metis_pg import db, migrate  # noqa: E402
from model_servers import FakeService, embedding_service  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="kills of the postmaster")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="metis-restart-"))
    service = FakeService(embedding_service(64))
    try:
        pgdata = scratch / "pgdata"
        dsn = db.embedded_dsn(pgdata)
        migrate.upgrade(dsn, settings=Settings.from_env())
        with metis_pg.Metis(dsn) as m:
            m.create_base("b", embedding_model="hashed", embedding_url=service.url, embedding_dim=64)
            kb = scratch / "kb"
            kb.mkdir()
            for i in range(300):
                (kb / f"d{i}.txt").write_text(f"Note {i} about the harbour lantern and ship {i * 7}.\n" * 20)
            m.index("b", kb)
            print(f"# {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
            for round_ in range(args.rounds):
                for mode in ("keyword", "hybrid"):
                    m.search("b", "harbour lantern", mode=mode)
                pid = int((pgdata / "postmaster.pid").read_text().split()[0])
                os.kill(pid, signal.SIGKILL)
                killed = time.perf_counter()
                # A search in the instant of the kill can still get a connection the dying server then
                # closes (DATABASE_UNAVAILABLE once): this times the restart, half a second later.
                time.sleep(0.5)
                times = []
                for i in range(4):
                    t = time.perf_counter()
                    m.search("b", "harbour lantern", mode=("keyword", "hybrid")[i % 2])
                    times.append((time.perf_counter() - t) * 1000)
                print(f"round {round_ + 1}: searches after the kill " + ", ".join(f"{t:.0f}" for t in times)
                      + f" ms (first answer {times[0] / 1000:.1f} s after the kill: "
                      f"{time.perf_counter() - killed - sum(times[1:]) / 1000:.1f} s)", flush=True)
        log = (pgdata / "log").read_text(encoding="utf-8", errors="replace")
        stamps = re.findall(r"^(\S+ \S+) UTC \[\d+\] LOG:  (database system was interrupted|database system was not "
                            r"properly shut down|database system is ready)", log, re.MULTILINE)
        print("server log:", "; ".join(f"{t[11:23]} {what}" for t, what in stamps[-3:]))
        print(f"# load after {os.getloadavg()[0]:.1f}")
    finally:
        service.close()
        db.stop_embedded(scratch / "pgdata")
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
