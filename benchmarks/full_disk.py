"""A real full disk under PostgreSQL, measured (issue 26: DISK_FULL's margin for the WAL and a table).

Needs root (``mount -t tmpfs``). Indexes generated documents (hashed vectors from a local fake
embedding service, tests/model_servers.py) into an embedded PostgreSQL whose files sit on small
tmpfs file systems, and prints what happens, case by case:

1. ``wal``: the whole data folder (tables and ``pg_wal``) on a ``--size-mb`` disk.
   a. guarded: ``METIS_DISK_FREE_MARGIN_PCT`` = ``--margin-pct``: indexing ends ``DISK_FULL``;
      the free space at the stop, the disk each chunk took (against the guard's estimate), a
      search and a checkpoint after it.
   b. unguarded (the disk check off, as before issue 26), on the same server: what PostgreSQL does when the disk
      fills, what ``metis index`` says, whether searches answer, and how the server comes back
      once the disk grows (``mount -o remount,size=``).
2. ``table``: the data folder (``pg_wal``) on the ordinary disk, metis's tables and indexes in
   a tablespace on a ``--table-mb`` tmpfs; unguarded (the guard measures the data folder's disk,
   not a tablespace's):
   what a write that cannot extend a table does, and whether searches answer.
3. ``own``: a server of your own (the same server reached by a DSN metis does not take for its
   embedded one, so the data folder is not measured): ``METIS_DATABASE_MAX_BYTES`` =
   its size + ``--own-mb``: ``DISK_FULL``; ``pg_database_size`` at the stop against the setting.

Usage::

    sudo python benchmarks/full_disk.py [--size-mb 160] [--table-mb 40] [--margin-pct 20] [--files 1200] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import psycopg  # noqa: E402

import metis_pg  # noqa: E402
from metis_pg import db, disk_space, migrate  # noqa: E402
from metis_pg.config import Settings  # noqa: E402
from metis_pg.db import embedded  # noqa: E402
from metis_pg.disk_space import BYTES_PER_CHUNK  # noqa: E402
from model_servers import FakeService, embedding_service  # noqa: E402

MB = 1_000_000
DIM = 64


def mount_tmpfs(folder: Path, size_mb: int) -> None:
    """Mount a tmpfs of `size_mb` MB on `folder` (world-traversable: PostgreSQL runs as pgserver)."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "tmpfs", str(folder)], check=True)


def unmount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def free(folder: Path) -> int:
    return shutil.disk_usage(folder).free


def write_documents(folder: Path, files: int, seed: int) -> Path:
    """`files` text files of ~12 KB of words drawn from a Zipf-like vocabulary of 30,000 words."""
    rng = random.Random(seed)
    vocabulary = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 10)))
                  for _ in range(30_000)]
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        paragraphs = [" ".join(rng.choices(vocabulary, weights, k=120)) + "." for _ in range(14)]
        (folder / f"doc{i:05d}.txt").write_text("\n\n".join(paragraphs), encoding="utf-8")
    return folder


def chunks_of(metis: metis_pg.Metis, base: str) -> int:
    return metis.base(base).chunks


@contextlib.contextmanager
def unguarded():
    """Indexing without the disk check (DiskGuard.check does nothing), as before issue 26."""
    check = disk_space.DiskGuard.check
    disk_space.DiskGuard.check = lambda self, needed_bytes, database_bytes=None: None
    try:
        yield
    finally:
        disk_space.DiskGuard.check = check


def search_after(metis: metis_pg.Metis, base: str) -> dict[str, Any]:
    """One keyword and one hybrid search: answered (ms, results) or the error seen."""
    out = {}
    for mode in ("keyword", "hybrid"):
        started = time.perf_counter()
        try:
            answer = metis.search([base], "survey of the harbour lanterns", mode=mode)
            out[mode] = f"answered in {1000 * (time.perf_counter() - started):.0f} ms, {len(answer.results)} results"
        except metis_pg.MetisError as exc:
            out[mode] = f"{exc.code} after {time.perf_counter() - started:.1f} s: {exc.message}"
    return out


def index_until_error(metis: metis_pg.Metis, base: str, folder: Path) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        report = metis.index(base, folder)
        return {"outcome": "finished", "chunks": report.chunks, "seconds": round(time.perf_counter() - started, 1)}
    except metis_pg.MetisError as exc:
        return {"outcome": exc.code, "message": exc.message, "seconds": round(time.perf_counter() - started, 1)}


def server_log_lines(pgdata: Path, words: tuple[str, ...] = ("PANIC", "No space left", "FATAL")) -> list[str]:
    """The server log's (pgdata/log) lines holding one of `words` (the last 8)."""
    try:
        text = (pgdata / "log").read_text(errors="replace")
    except OSError as exc:
        return [f"log not read: {exc}"]
    return [line.strip() for line in text.splitlines() if any(w in line for w in words)][-8:]


def case_wal(args, scratch: Path, service: FakeService, corpus: Path, more: Path) -> dict[str, Any]:
    disk = scratch / "wal-disk"
    mount_tmpfs(disk, args.size_mb)
    pgdata = disk / "pgdata"
    result: dict[str, Any] = {"disk_mb": args.size_mb}
    try:
        dsn = db.embedded_dsn(pgdata)
        migrate.upgrade(dsn, settings=Settings.from_env())
        result["free_after_initdb_mb"] = round(free(disk) / MB, 1)
        guarded = metis_pg.Metis(dsn, settings=Settings(disk_free_margin_bytes=0, disk_free_margin_pct=args.margin_pct))
        guarded.create_base("full", embedding_model="test-embed", embedding_url=service.url, embedding_dim=DIM)
        before = free(disk)
        run = index_until_error(guarded, "full", corpus)
        chunks = chunks_of(guarded, "full")
        used = before - free(disk)
        result["guarded"] = {
            **run, "margin": f"{args.margin_pct}% = {args.size_mb * args.margin_pct / 100:.0f} MB",
            "chunks_written": chunks, "free_at_stop_mb": round(free(disk) / MB, 1),
            "disk_per_chunk_bytes": round(used / max(chunks, 1)), "estimate_per_chunk_bytes": BYTES_PER_CHUNK,
            "status": guarded.base("full").status, "searches": search_after(guarded, "full"),
        }
        with guarded.pool.connection() as conn:
            conn.execute("CHECKPOINT")
        result["guarded"]["free_after_checkpoint_mb"] = round(free(disk) / MB, 1)
        guarded.close()

        # b. without the guard (as before issue 26): the disk fills for real.
        bare = metis_pg.Metis(dsn, settings=Settings(disk_free_margin_bytes=0, disk_free_margin_pct=0))
        with unguarded():
            run = index_until_error(bare, "full", more)
        result["unguarded"] = {**run, "free_mb": round(free(disk) / MB, 2),
                               "postmaster_alive": embedded.postmaster_alive(pgdata, thorough=True),
                               "server_log": server_log_lines(pgdata),
                               "searches_while_full": search_after(bare, "full")}
        subprocess.run(["mount", "-o", f"remount,size={args.size_mb * 2}m", str(disk)], check=True)
        result["unguarded"]["searches_after_the_disk_grew"] = search_after(bare, "full")
        try:
            result["unguarded"]["status_after"] = bare.base("full").status
        except metis_pg.MetisError as exc:
            result["unguarded"]["status_after"] = f"{exc.code}: {exc.message}"
        bare.close()
    finally:
        server = embedded._servers.pop(pgdata.resolve(), None)
        if server is not None:
            server.cleanup()
        unmount(disk)
    return result


def case_table(args, scratch: Path, service: FakeService, corpus: Path) -> dict[str, Any]:
    home = scratch / "table-home"
    disk = scratch / "table-disk"
    mount_tmpfs(disk, args.table_mb)
    space = disk / "space"
    space.mkdir()
    shutil.chown(space, "pgserver")
    pgdata = home / "pgdata"
    result: dict[str, Any] = {"disk_mb": args.table_mb}
    try:
        dsn = db.embedded_dsn(pgdata)
        migrate.upgrade(dsn, settings=Settings.from_env())
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"CREATE TABLESPACE tiny LOCATION '{space}'")
            admin.execute("ALTER TABLE ALL IN TABLESPACE pg_default SET TABLESPACE tiny")
            admin.execute("ALTER INDEX ALL IN TABLESPACE pg_default SET TABLESPACE tiny")
        bare = metis_pg.Metis(dsn, settings=Settings(disk_free_margin_bytes=0, disk_free_margin_pct=0))
        bare.create_base("full", embedding_model="test-embed", embedding_url=service.url, embedding_dim=DIM)
        with unguarded():  # it would not see this disk anyway: it measures the data folder's
            run = index_until_error(bare, "full", corpus)
        result["unguarded"] = {**run, "free_mb": round(free(disk) / MB, 2),
                               "postmaster_alive": embedded.postmaster_alive(pgdata, thorough=True),
                               "server_log": server_log_lines(pgdata, ("could not extend", "No space left", "PANIC")),
                               "status": bare.base("full").status, "searches": search_after(bare, "full")}
        bare.close()
    finally:
        server = embedded._servers.pop(pgdata.resolve(), None)
        if server is not None:
            server.cleanup()
        unmount(disk)
        shutil.rmtree(home, ignore_errors=True)
    return result


def case_own(args, scratch: Path, service: FakeService, corpus: Path) -> dict[str, Any]:
    pgdata = scratch / "own-home" / "pgdata"
    result: dict[str, Any] = {}
    try:
        dsn = db.embedded_dsn(pgdata) + "&application_name=own-server"  # not taken for the embedded one
        migrate.upgrade(dsn, settings=Settings.from_env())
        with psycopg.connect(dsn) as conn:
            size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
            lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        limit = size + args.own_mb * MB
        own = metis_pg.Metis(dsn, settings=Settings(database_max_bytes=limit))
        assert own.pool.data_folder is None
        own.create_base("full", embedding_model="test-embed", embedding_url=service.url, embedding_dim=DIM)
        run = index_until_error(own, "full", corpus)
        with psycopg.connect(dsn) as conn:
            after = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
            wal = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn,)).fetchone()[0]
        result = {**run, "max_bytes_mb": round(limit / MB, 1), "size_before_mb": round(size / MB, 1),
                  "size_at_stop_mb": round(after / MB, 1), "wal_written_mb": round(float(wal) / MB, 1),
                  "chunks_written": chunks_of(own, "full"), "searches": search_after(own, "full")}
        own.close()
    finally:
        server = embedded._servers.pop(pgdata.resolve(), None)
        if server is not None:
            server.cleanup()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=160, help="size of each small disk (tmpfs)")
    parser.add_argument("--table-mb", type=int, default=40, help="size of the tablespace's disk (tmpfs)")
    parser.add_argument("--margin-pct", type=float, default=20.0, help="METIS_DISK_FREE_MARGIN_PCT of the guarded run")
    parser.add_argument("--own-mb", type=int, default=40, help="METIS_DATABASE_MAX_BYTES above the size at start")
    parser.add_argument("--files", type=int, default=1200, help="documents of ~12 KB each to index")
    parser.add_argument("--cases", default="wal,table,own")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root: mount -t tmpfs", file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="metis-fulldisk-", dir="/var/tmp"))
    scratch.chmod(0o755)
    service = FakeService(embedding_service(DIM))
    results: dict[str, Any] = {"load": os.getloadavg()}
    try:
        corpus = write_documents(scratch / "corpus", args.files, seed=1)
        more = write_documents(scratch / "more", args.files, seed=2)
        cases = args.cases.split(",")
        if "wal" in cases:
            results["wal"] = case_wal(args, scratch, service, corpus, more)
        if "table" in cases:
            results["table"] = case_table(args, scratch, service, corpus)
        if "own" in cases:
            results["own"] = case_own(args, scratch, service, corpus)
    finally:
        service.close()
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(results, indent=None if args.json else 2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
