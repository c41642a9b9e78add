"""The ``metis`` command as a shell sees it (issue 15): flags in --help, completion, a busy port,
a METIS_HOME that is a file, ``metis db stop``."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from cli_runner import METIS_SCRIPT, run_cli
from model_servers import free_port


def test_help_shows_boolean_options_as_flags():
    for command in (["search"], ["index"], ["ls"], ["base", "list"], ["facts"]):
        result = run_cli(*command, "--help")
        assert result.code == 0, result.stderr
        assert "<bool>" not in result.stdout and "BOOLEAN" not in result.stdout, command
        assert re.search(r"^  --json +Print JSON\.$", result.stdout, re.MULTILINE), command
    search = run_cli("search", "--help").stdout
    for flag in ("--no-rerank", "--compare", "--jsonl", "--csv", "--md", "--files"):
        assert re.search(rf"^  {flag} +[A-Z]", search, re.MULTILINE), flag


def test_shell_completion_is_offered_and_completes_commands_and_options():
    assert "--install-completion" in run_cli("--help").stdout
    env = {**os.environ, "_METIS_COMPLETE": "complete_bash", "COMP_WORDS": "metis se", "COMP_CWORD": "1"}
    done = subprocess.run([str(METIS_SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0 and done.stdout.split() == ["search", "serve"]
    env.update(COMP_WORDS="metis search docs q --js", COMP_CWORD="4")
    done = subprocess.run([str(METIS_SCRIPT)], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.split() == ["--json", "--jsonl"]
    script = subprocess.run([str(METIS_SCRIPT), "--show-completion", "bash"], capture_output=True, text=True,
                            timeout=60)
    assert script.returncode == 0 and "_METIS_COMPLETE=complete_bash" in script.stdout


@pytest.mark.parametrize("command", [["serve"], ["eos", "serve"]], ids=["serve", "eos-serve"])
def test_serving_on_a_busy_port_is_one_line_and_exit_7(dsn, command):
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        result = run_cli(*command, "--port", str(port), *(["--dsn", dsn] if command == ["serve"] else []))
    assert result.code == 7
    assert result.stderr.strip() == (f"error [PORT_IN_USE]: port {port} on 127.0.0.1 is in use by another process: "
                                     "stop it, or choose another port with --port")


def test_a_metis_home_that_is_a_file_is_database_unavailable(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.write_text("not a folder", encoding="utf-8")
    monkeypatch.setenv("METIS_HOME", str(home))
    monkeypatch.delenv("METIS_DATABASE_URL", raising=False)
    result = run_cli("base", "list")
    assert result.code == 5
    assert result.stderr.strip() == (f"error [DATABASE_UNAVAILABLE]: could not start the embedded PostgreSQL: "
                                     f"cannot create {home}/pgdata: Not a directory")
    assert run_cli("base", "list", "--json").json()["error"]["code"] == "DATABASE_UNAVAILABLE"


HOLD = "import sys, time, metis_pg; m = metis_pg.connect(); print('up', flush=True); time.sleep(120)"


def _postmaster(pgdata: Path) -> int | None:
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if psutil.pid_exists(pid) else None


def test_db_stop_stops_the_embedded_server_left_running():
    home = Path(tempfile.mkdtemp(prefix="metis-test-dbstop-", dir="/var/tmp"))
    env = {**os.environ, "METIS_HOME": str(home)}
    env.pop("METIS_DATABASE_URL", None)
    holder = subprocess.Popen([sys.executable, "-c", HOLD], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "up"
        pgdata = home / "pgdata"
        pid = _postmaster(pgdata)
        assert pid is not None

        def db_stop(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([str(METIS_SCRIPT), "db", "stop", *args], capture_output=True, text=True,
                                  env=env, timeout=120)

        busy = db_stop()  # a live process uses it: refused, still running
        assert busy.returncode == 2 and f"in use by 1 running process(es) (pid {holder.pid})" in busy.stderr
        assert _postmaster(pgdata) == pid
        # Killed with SIGKILL, the holder leaves the server running in the background.
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
        time.sleep(0.5)
        assert _postmaster(pgdata) == pid
        stopped = db_stop()
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.strip() == f"stopped the embedded PostgreSQL in {pgdata.resolve()} (pid {pid})"
        assert _postmaster(pgdata) is None
        again = db_stop()
        assert again.returncode == 0 and again.stdout.strip().endswith("is not running")
        # --force stops it under a live user (who loses its connections).
        holder = subprocess.Popen([sys.executable, "-c", HOLD], env=env, stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "up"
        pid = _postmaster(pgdata)
        assert pid is not None and db_stop().returncode == 2
        forced = db_stop("--force")
        assert forced.returncode == 0, forced.stderr
        assert forced.stdout.strip() == f"stopped the embedded PostgreSQL in {pgdata.resolve()} (pid {pid})"
        assert _postmaster(pgdata) is None and holder.poll() is None
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(30)
        subprocess.run([str(METIS_SCRIPT), "db", "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(home, ignore_errors=True)
