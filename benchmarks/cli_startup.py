"""Start-up cost of the ``metis`` command (issue 25, item 6): what a command costs beyond its work.

Prints, in new processes:

- ``metis --version``: wall time (median of R runs);
- the import time of ``metis_pg.cli`` and of ``metis_pg.api`` (``python -X importtime``, the
  cumulative figure of the top module, median of R runs);
- ``metis search BASE QUESTION --json`` with the embedded server already up (another process
  holds it: the benchmark): wall time, the search's own ``took.total``, and their difference,
  the overhead (Python start, imports, settings, pool, the question's model, exit);
- the same with no process holding the server: each command starts it and stops it at exit
  (``METIS_SERVER_IDLE_S=0``);
- the same right after another command, which left the server up (``METIS_SERVER_IDLE_S``, its
  default of 60 s): what a series of commands costs after its first;
- with ``--phases``: where the time of one ``metis search`` goes, phase by phase, in a new process
  doing what the command does step by step (Python start, imports, Typer's build of the
  commands and its parse of the arguments, settings, joining the server, pool and schema revision, listing the bases, the
  model's load and first question, the search, printing, closing, exit), medians of R runs, for
  ``--mode keyword`` and hybrid. The command itself loads the model in a thread while it
  connects; here each phase runs after the other.

Usage::

    python benchmarks/cli_startup.py                 # a throwaway METIS_HOME in /var/tmp
    python benchmarks/cli_startup.py --repeats 7
    python benchmarks/cli_startup.py --phases        # and the phase table
    PYTHONPATH=../other-checkout python benchmarks/cli_startup.py --phases   # that checkout's code
    python benchmarks/cli_startup.py --phases --code ../before --code .       # a before and an after, in turns

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

#: The command as ``python -m``: the same entry point as the console script (``metis_pg.cli``'s
#: ``__main__``), and PYTHONPATH can point it at another checkout to measure a before and an after.
METIS = [sys.executable, "-m", "metis_pg.cli"]
DOCS = {
    "leave.md": "# Leave\n\nFull-time staff get 25 days of paid vacation per calendar year.\n",
    "router.txt": "Reset the router using the red button for ten seconds.\n",
    "orders.txt": "Purchase order PO-2231 was approved on Monday.\n",
}


def wall(command: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr}")
    return time.perf_counter() - t0, done.stdout


def import_ms(module: str, env: dict[str, str]) -> float:
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True,
                          text=True, env=env, check=True)
    line = [x for x in done.stderr.splitlines() if re.search(rf"\|\s*{re.escape(module)}$", x)][-1]
    return int(line.split("|")[1]) / 1000


#: Run in a new process by :func:`phases`: what ``metis search BASE QUESTION --json`` does, phase by
#: phase; prints the wall-clock time at the end of each phase (JSON on stderr).
PHASES_CHILD = r"""
import json, sys, time
marks = [("start", time.time(), time.process_time())]
def mark(name):
    marks.append((name, time.time(), time.process_time()))
base, question, mode = sys.argv[1:4]
import metis_pg.cli as cli
argv, sys.argv = sys.argv, ["metis", "search"]
getattr(cli, "one_shot_process", lambda: None)()  # as the console script sets up a search's process
sys.argv = argv
try:
    app = cli._app("search")  # the commands a search's run registers
except TypeError:  # an older checkout: every command
    app = cli._app()
import typer.main
group = typer.main.get_command(app)  # what Typer builds from them at each run
# and its parse of the arguments: Typer 0.2x checks each option with a pydantic TypeAdapter (importing pydantic)
context = group.make_context("metis", ["search", base, question, "--json", "--mode", mode])
group.get_command(context, "search").make_context("search", [base, question, "--json", "--mode", mode],
                                                  parent=context)
mark("import the command tree")
import metis_pg.api as api
from metis_pg.formats import search_output
mark("import the library")
from metis_pg.config import Settings
from metis_pg import db
settings = Settings.from_env()
mark("settings")
dsn = db.resolve_dsn(None, settings)
mark("join the server")
m = api.Metis(dsn, settings=settings)
m._check_revision(dsn, settings)
mark("pool and schema revision")
m.base_names(for_reading=True)
mark("list the bases")
if mode != "keyword":
    embedder = m.embedder(m._base_row(base).base_spec)
    getattr(embedder, "_get_model", lambda: None)()
    mark("load the model")
    embedder.embed_queries([question])
    mark("the model's first question")
answer = m.search([base], question, mode=mode)
mark("search (model loaded)")
sys.stdout.write(search_output(answer, "json"))
sys.stdout.flush()
mark("print")
m.close()
mark("close")
sys.stderr.write("PHASES " + json.dumps(marks) + chr(10))
getattr(cli, "_exit_now", sys.exit)(0)  # as the console script ends (metis_pg.cli.script)
"""


def phase_run(env: dict[str, str], base: str, question: str, mode: str) -> tuple[dict[str, float], dict[str, float]]:
    """Run :data:`PHASES_CHILD` once; return the seconds of each phase of a search, ``"exit"`` last: wall
    time, and the CPU time of the command's own process (what a quiet machine's wall time comes down to,
    less the waits on the server and on disk; Python start and exit are not in the CPU figures)."""
    launched = time.time()
    done = subprocess.run([sys.executable, "-c", PHASES_CHILD, base, question, mode], capture_output=True,
                          text=True, env=env, check=True)
    ended = time.time()
    line = [x for x in done.stderr.splitlines() if x.startswith("PHASES ")][-1]
    marks = json.loads(line[len("PHASES "):])
    run = {"Python start": marks[0][1] - launched}
    cpu = {}
    for (_, t0, c0), (name, t1, c1) in zip(marks, marks[1:]):
        run[name] = t1 - t0
        cpu[name] = c1 - c0
    run["exit"] = ended - marks[-1][1]
    run["total"] = ended - launched
    cpu["total"] = marks[-1][2] - marks[0][2]
    return run, cpu


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--phases", action="store_true", help="also print where a search's time goes, by phase")
    parser.add_argument("--code", action="append", metavar="CHECKOUT", default=[],
                        help="measure this checkout's metis_pg (its PYTHONPATH); given twice or more, the "
                             "checkouts take turns at each repeat, so they share the machine's load; the base "
                             "is made by the last one")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="metis-startup-", dir="/var/tmp"))  # a short socket path
    # Idle 0: each command without a holder starts the server and stops it at exit; the "idle" case
    # below sets the default (60 s) again, so a command finds the server its predecessor left up.
    env = {**os.environ, "METIS_HOME": str(home), "METIS_SERVER_IDLE_S": "0"}
    env.pop("METIS_DATABASE_URL", None)
    codes = {path: {**env, "PYTHONPATH": str(Path(path).resolve())} for path in args.code} or {"": env}
    # `python -c` puts the working folder first on sys.path: run from inside a checkout, every
    # --code side imported that checkout's metis_pg. The children run from the throwaway home.
    os.chdir(home)
    packages = {}
    for code, code_env in codes.items():
        # Bytecode first, as an installed package has it: with PYTHONDONTWRITEBYTECODE set (as on the
        # developers' machines) every run would otherwise compile metis_pg's ~55 modules again (~0.3 s).
        packages[code] = subprocess.run([sys.executable, "-c", "import metis_pg, os; print(os.path.dirname("
                                         "metis_pg.__file__))"], capture_output=True, text=True, check=True,
                                        env=code_env).stdout.strip()
        subprocess.run([sys.executable, "-m", "compileall", "-q", packages[code]], check=True)
    newest = list(codes.values())[-1]

    def each(measure):  # {code: [measure(code's env) for each repeat]}, the codes taking turns
        results: dict[str, list] = {code: [] for code in codes}
        for _ in range(args.repeats):
            for code, code_env in codes.items():
                results[code].append(measure(code_env))
        return results

    loads = [os.getloadavg()[0]]
    try:
        folder = home / "docs"
        folder.mkdir()
        for name, text in DOCS.items():
            (folder / name).write_text(text, encoding="utf-8")
        subprocess.run([*METIS, "db", "upgrade"], env=newest, check=True, capture_output=True)
        subprocess.run([*METIS, "index", str(folder), "--base", "b", "--json"], env=newest, check=True,
                       capture_output=True)
        search = [*METIS, "search", "b", "how many vacation days", "--json"]
        version = each(lambda e: wall([*METIS, "--version"], e)[0])
        imports = {m: each(lambda e, m=m: import_ms(m, e)) for m in ("metis_pg.cli", "metis_pg.api")}

        def search_once(e: dict[str, str]) -> tuple[float, float]:
            seconds, out = wall(search, e)
            return seconds, json.loads(out)["took"]["total"] / 1000

        phase_runs: dict[str, dict[str, list]] = {}  # {"keyword, cold": {code: [(wall, cpu), ...]}}

        def phases_of(held: str) -> None:
            if args.phases:
                for mode in ("keyword", "hybrid"):
                    phase_runs[f"{mode}, {held}"] = each(lambda e, mode=mode: phase_run(
                        e, "b", "how many vacation days", mode))

        phases_of("cold")
        cold = each(search_once)  # no other process: each command starts the server and stops it at exit
        # The server left up by the command before (METIS_SERVER_IDLE_S, default 60 s; a checkout without
        # the setting starts and stops it each time, as cold).
        idle = each(lambda e: (wall(search, {**e, "METIS_SERVER_IDLE_S": "60"}), search_once(
            {**e, "METIS_SERVER_IDLE_S": "60"}), subprocess.run([*METIS, "db", "stop"], env=e, capture_output=True))[1])
        loads.append(os.getloadavg()[0])
        holder = subprocess.Popen([sys.executable, "-c", "import sys, metis_pg; m = metis_pg.connect(); "
                                   "print('up', flush=True); sys.stdin.read()"], env=newest, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "up"
            warm = each(search_once)
            phases_of("held")
        finally:
            holder.stdin.close()
            holder.wait(60)
        loads.append(os.getloadavg()[0])
    finally:
        subprocess.run([*METIS, "db", "stop", "--force"], env=newest, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)

    med = statistics.median
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average (1 min) {', '.join(f'{x:.1f}' for x in loads)} (start, midway, end)")
    print(f"command: python benchmarks/cli_startup.py --repeats {args.repeats}{' --phases' * args.phases}"
          + "".join(f" --code {c}" for c in args.code))
    for code in codes:
        print(f"\ncode: {packages[code]}")
        print(f"metis --version:                 median {med(version[code]):.2f} s")
        for module, ms in imports.items():
            print(f"import {module + ':':<22}   median {med(ms[code]):.0f} ms (python -X importtime)")
        for label, runs in (("server up (held elsewhere)", warm[code]), ("server started and stopped", cold[code]),
                            ("server left up by the command before", idle[code])):
            walls, took = [w for w, _ in runs], [t for _, t in runs]
            overhead = [w - t for w, t in runs]
            print(f"metis search, {label}: wall median {med(walls):.2f} s, search {med(took) * 1000:.0f} ms, "
                  f"overhead median {med(overhead):.2f} s (goal <= 0.3 s quiet)")
        if phase_runs:
            tables = {key: medians([w for w, _ in runs[code]]) for key, runs in phase_runs.items()}
            cpus = {key: medians([c for _, c in runs[code]]) for key, runs in phase_runs.items()}
            print("\nmetis search, by phase, medians in ms (cold: the command starts the server and stops it at exit;"
                  " held: another process holds it):")
            print(f"{'phase':<28}" + "".join(f"{m:>17}" for m in tables))
            names = list(max(tables.values(), key=len))  # the hybrid runs have every phase
            for name in names:
                print(f"{name:<28}" + "".join(f"{t[name] * 1000:>17.0f}" if name in t else f"{'-':>17}"
                                               for t in tables.values())
                      + "   | CPU " + " ".join(f"{t[name] * 1000:>5.0f}" if name in t else f"{'-':>5}"
                                              for t in cpus.values()))


if __name__ == "__main__":
    main()
