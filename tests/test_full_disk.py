"""A real full disk under PostgreSQL (issue 26, item 4): DISK_FULL stops indexing while its margin is free.

``tests/test_indexing_faults.py`` fakes the free space; here a real small file system (a tmpfs,
mounted as root: CI runs as root; elsewhere the test is skipped, saying so) holds the embedded
server's whole data folder, tables and WAL, and real documents fill it. And a server of your own
(a DSN metis does not take for its embedded server) stops at ``METIS_DATABASE_MAX_BYTES``.
Figures of every case, the unguarded ones included: ``benchmarks/full_disk.py``.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import metis_pg
from metis_pg import db, disk_space, migrate
from metis_pg.config import Settings
from metis_pg.db import embedded
from metis_pg.errors import DiskFull

from model_servers import FakeService, embedding_service
from pg_servers import embedded_server

DIM = 64
MB = 1_000_000


def documents(folder: Path, files: int) -> Path:
    """`files` text files of ~12 KB (about 8 chunks each) of words of a Zipf-like vocabulary."""
    rng = random.Random(7)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 10)))
             for _ in range(20_000)]
    weights = [1 / (rank + 1) for rank in range(len(words))]
    folder.mkdir(parents=True)
    for i in range(files):
        text = "\n\n".join(" ".join(rng.choices(words, weights, k=120)) + "." for _ in range(14))
        (folder / f"doc{i:04d}.txt").write_text(f"harbour lantern {i}\n\n" + text, encoding="utf-8")
    return folder


@pytest.fixture()
def model() -> Iterator[FakeService]:
    service = FakeService(embedding_service(DIM))
    yield service
    service.close()


@pytest.fixture(params=[192, 128], ids=["192MB", "128MB"])
def small_disk(request) -> Iterator[Path]:
    """A small tmpfs under /var/tmp (PostgreSQL runs as the user pgserver: it must reach it); its pgdata."""
    folder = Path(tempfile.mkdtemp(prefix="metis-small-disk-", dir="/var/tmp"))
    folder.chmod(0o755)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={request.param}m,mode=0755", "tmpfs", str(folder)],
                             capture_output=True, text=True) if shutil.which("mount") else None
    if mounted is None or mounted.returncode != 0:
        folder.rmdir()
        pytest.skip("a real small disk needs `mount -t tmpfs` (root): "
                    + (mounted.stderr.strip() if mounted is not None else "no mount command"))
    pgdata = (folder / "pgdata").resolve()
    try:
        yield pgdata
    finally:
        server = embedded._servers.pop(pgdata, None)
        if server is not None:
            server.cleanup()
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def test_indexing_onto_a_real_small_disk_stops_with_disk_full_while_the_margin_is_free(small_disk, model, tmp_path):
    """192 MB: the margin is METIS_DISK_FREE_MARGIN_PCT (40 %: 77 MB). 128 MB: both margins set to 0,
    the floor (64 MB) still holds: PostgreSQL PANICs when it cannot write its next 16 MB WAL segment."""
    dsn = db.embedded_dsn(small_disk)
    migrate.upgrade(dsn, settings=Settings.from_env())
    pct = 40 if shutil.disk_usage(small_disk).total > 150 * MB else 0
    metis = metis_pg.Metis(dsn, settings=Settings(disk_free_margin_bytes=0, disk_free_margin_pct=pct))
    try:
        metis.create_base("full", embedding_model="test-embed", embedding_url=model.url, embedding_dim=DIM)
        folder = documents(tmp_path / "kb", 800)
        with pytest.raises(DiskFull) as caught:
            metis.index("full", folder)
        usage = shutil.disk_usage(small_disk)
        margin = max(usage.total * pct / 100, disk_space.MIN_MARGIN_BYTES)
        assert f"free in {small_disk}" in caught.value.message and "stay free for searches and the WAL" in \
            caught.value.message
        # The margin held on the real disk, WAL included, and a checkpoint still has room.
        assert usage.free >= margin * 0.9, (usage.free / MB, margin / MB)
        assert embedded.postmaster_alive(small_disk, thorough=True)
        info = metis.base("full")
        assert info.status in ("waiting", "ready") and info.chunks > 500
        with metis.pool.connection() as conn:
            conn.execute("CHECKPOINT")
        answer = metis.search(["full"], "harbour lantern", mode="keyword")
        assert answer.results, "searches answer on the nearly full disk"
    finally:
        metis.close()


def test_a_server_of_your_own_stops_at_database_max_bytes(dsn, model, tmp_path):
    # The session's server reached by a DSN metis does not take for its embedded one: its disk is
    # not measured, its database's size is (pg_database_size against METIS_DATABASE_MAX_BYTES).
    own_dsn = dsn + ("&" if "?" in dsn else "?") + "application_name=own-server"
    with psycopg.connect(own_dsn) as conn:
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    limit = size + 20 * MB
    metis = metis_pg.Metis(own_dsn, settings=Settings(database_max_bytes=limit))
    base = f"own-{random.randrange(10**9)}"
    try:
        assert metis.pool.data_folder is None
        metis.create_base(base, embedding_model="test-embed", embedding_url=model.url, embedding_dim=DIM)
        with pytest.raises(DiskFull, match=r"over METIS_DATABASE_MAX_BYTES \(\d+ MB\): indexing stopped"):
            metis.index(base, documents(tmp_path / "kb", 600))
        with psycopg.connect(own_dsn) as conn:
            assert conn.execute("SELECT pg_database_size(current_database())").fetchone()[0] <= limit
        info = metis.base(base)
        assert info.status in ("waiting", "ready") and info.chunks > 500
    finally:
        metis.drop_base(base)
        metis.close()


def test_a_run_stopped_by_disk_full_is_not_a_finished_run(dsn, model, tmp_path):
    # Found by the tester (2026-12-05): a first run stopped by DISK_FULL before its first document
    # stamped last_indexed_at, so `metis status` said "last indexed <now>" and every search warned
    # NO_READABLE_DOCUMENT "the sources hold no document it reads" of 1,167 HTML files.
    own_dsn = dsn + ("&" if "?" in dsn else "?") + "application_name=own-server"
    roomy = metis_pg.Metis(own_dsn)
    with psycopg.connect(own_dsn) as conn:
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    full = metis_pg.Metis(own_dsn, settings=Settings(database_max_bytes=size))
    first, kept = f"first-{random.randrange(10**9)}", f"kept-{random.randrange(10**9)}"
    try:
        for base in (first, kept):
            roomy.create_base(base, embedding_model="test-embed", embedding_url=model.url, embedding_dim=DIM)
        with pytest.raises(DiskFull):
            full.index(first, documents(tmp_path / "kb", 3))
        info = roomy.base(first)
        assert info.chunks == 0 and info.last_indexed_at is None
        answer = roomy.search([first], "harbour lantern", mode="keyword")
        assert [w.code for w in answer.warnings] == ["NOTHING_INDEXED"], answer.warnings
        # A base indexed before keeps the time of its last finished run.
        roomy.index(kept, documents(tmp_path / "small", 1))
        finished = roomy.base(kept).last_indexed_at
        assert finished is not None
        with pytest.raises(DiskFull):
            full.index(kept, documents(tmp_path / "more", 3))
        assert roomy.base(kept).last_indexed_at == finished
    finally:
        for base in (first, kept):
            roomy.drop_base(base)
        full.close()
        roomy.close()


def test_a_tablespace_on_a_small_disk_is_watched_too(model, tmp_path):
    """Tables and indexes moved to a tablespace on a small disk (the WAL stays in the data folder):
    the check measures that disk too. Measured before: `could not extend file "pg_tblspc/…"`, the run
    failing with DATABASE_UNAVAILABLE (benchmarks/full_disk.py, case table)."""
    disk = Path(tempfile.mkdtemp(prefix="metis-small-tblspc-", dir="/var/tmp"))
    disk.chmod(0o755)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m,mode=0755", "tmpfs", str(disk)],
                             capture_output=True, text=True) if shutil.which("mount") else None
    if mounted is None or mounted.returncode != 0:
        disk.rmdir()
        pytest.skip("a real small disk needs `mount -t tmpfs` (root): "
                    + (mounted.stderr.strip() if mounted is not None else "no mount command"))
    try:
        space = disk / "space"
        space.mkdir()
        shutil.chown(space, "pgserver")  # the user the embedded server runs as, under root
        with embedded_server("tblspc") as (uri, _):
            migrate.upgrade(uri, settings=Settings.from_env())
            with psycopg.connect(uri, autocommit=True) as admin:
                admin.execute(f"CREATE TABLESPACE small LOCATION '{space}'")
                admin.execute("ALTER TABLE ALL IN TABLESPACE pg_default SET TABLESPACE small")
                admin.execute("ALTER INDEX ALL IN TABLESPACE pg_default SET TABLESPACE small")
            # 12 MB kept free (the percentage would apply to the data folder's big disk too).
            metis = metis_pg.Metis(uri, settings=Settings(disk_free_margin_bytes=12 * MB, disk_free_margin_pct=0))
            try:
                metis.create_base("full", embedding_model="test-embed", embedding_url=model.url, embedding_dim=DIM)
                with pytest.raises(DiskFull, match=rf"the disk of the tablespace in {space} is nearly full"):
                    metis.index("full", documents(tmp_path / "kb", 600))
                assert shutil.disk_usage(disk).free >= 0.9 * 12 * MB
                info = metis.base("full")
                assert info.status in ("waiting", "ready") and info.chunks > 200
                assert metis.search(["full"], "harbour lantern", mode="keyword").results
            finally:
                metis.close()
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
        shutil.rmtree(disk, ignore_errors=True)
