"""Start-up cost of the ``metis`` command (issue 25, item 6): what a command costs beyond its work.

Prints, in new processes:

- ``metis --version``: wall time (median of R runs);
- the import time of ``metis_pg.cli`` and of ``metis_pg.api`` (``python -X importtime``, the
  cumulative figure of the top module, median of R runs);
- ``metis search BASE QUESTION --json`` with the embedded server already up (another process
  holds it: the benchmark): wall time, the search's own ``took.total``, and their difference,
  the overhead (Python start, imports, settings, pool, the question's model, exit);
- the same with no process holding the server: each command starts it and stops it at exit.

Usage::

    python benchmarks/cli_startup.py                 # a throwaway METIS_HOME in /var/tmp
    python benchmarks/cli_startup.py --repeats 7

Goal (issue 25): overhead of ``metis search`` <= 0.3 s on a quiet machine. Figures double
under load: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

METIS = str(Path(sys.executable).with_name("metis"))
DOCS = {
    "leave.md": "# Leave\n\nFull-time staff get 25 days of paid vacation per calendar year.\n",
    "router.txt": "Reset the router using the red button for ten seconds.\n",
    "orders.txt": "Purchase order PO-2231 was approved on Monday.\n",
}


def wall(command: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return time.perf_counter() - t0, done.stdout


def import_ms(module: str, env: dict[str, str]) -> float:
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True,
                          text=True, env=env, check=True)
    line = [x for x in done.stderr.splitlines() if re.search(rf"\|\s*{re.escape(module)}$", x)][-1]
    return int(line.split("|")[1]) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="metis-startup-", dir="/var/tmp"))  # a short socket path
    env = {**os.environ, "METIS_HOME": str(home)}
    env.pop("METIS_DATABASE_URL", None)
    try:
        folder = home / "docs"
        folder.mkdir()
        for name, text in DOCS.items():
            (folder / name).write_text(text, encoding="utf-8")
        subprocess.run([METIS, "db", "upgrade"], env=env, check=True, capture_output=True)
        subprocess.run([METIS, "index", str(folder), "--base", "b", "--json"], env=env, check=True,
                       capture_output=True)
        search = [METIS, "search", "b", "how many vacation days", "--json"]
        version = [wall([METIS, "--version"], env)[0] for _ in range(args.repeats)]
        imports = {m: [import_ms(m, env) for _ in range(args.repeats)] for m in ("metis_pg.cli", "metis_pg.api")}

        def searches() -> tuple[list[float], list[float]]:
            walls, took = [], []
            for _ in range(args.repeats):
                seconds, out = wall(search, env)
                walls.append(seconds)
                took.append(json.loads(out)["took"]["total"] / 1000)
            return walls, took

        cold = searches()  # no other process: each command starts the server and stops it at exit
        holder = subprocess.Popen([sys.executable, "-c", "import sys, metis_pg; m = metis_pg.connect(); "
                                   "print('up', flush=True); sys.stdin.read()"], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "up"
            warm = searches()
        finally:
            holder.stdin.close()
            holder.wait(60)
    finally:
        subprocess.run([METIS, "db", "stop", "--force"], env=env, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)

    med = statistics.median
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"command: python benchmarks/cli_startup.py --repeats {args.repeats}")
    print(f"metis --version:                 median {med(version):.2f} s")
    for module, ms in imports.items():
        print(f"import {module + ':':<22}   median {med(ms):.0f} ms (python -X importtime)")
    for label, (walls, took) in (("server up (held elsewhere)", warm), ("server started and stopped", cold)):
        overhead = [w - t for w, t in zip(walls, took)]
        print(f"metis search, {label}: wall median {med(walls):.2f} s, search {med(took) * 1000:.0f} ms, "
              f"overhead median {med(overhead):.2f} s (goal <= 0.3 s quiet)")


if __name__ == "__main__":
    main()
