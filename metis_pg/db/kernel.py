"""metis_pg's own cosine kernel for the embedded server's dense scan (issue 24).

``cosine_kernel.c`` (beside this file) computes what pgvector's ``<=>`` computes on halfvec, and
asks the CPU for the next rows' bytes as it goes: the exact dense scan of 100,000 rows in ~20 ms
instead of ~37 (docs/performance.md, ``benchmarks/dense_kernel.py``). On the embedded server,
the first search of a process calls :func:`ensure`: it builds the library once per machine and
user (``cc`` against the bundled server's headers, ~0.3 s, cached in ``/var/tmp/metis-kernel-<uid>``,
a folder the server's own user can read) and creates ``metis_cosine_distance(halfvec, halfvec)``
from it in the database (``sql/kernel/create.sql``), or points it at this machine's build again
(a base backup restored elsewhere). The hybrid statement then calls it in place of ``<=>``.

Nothing fails for want of it: without a C compiler, on a server that is not the embedded one
(``METIS_DATABASE_URL``, Citus), or for a role that is not a superuser, searches use pgvector's
``<=>`` as before.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg
from psycopg import sql

from .. import sqlfiles

__all__ = ["FUNCTION", "library", "ensure"]

log = logging.getLogger(__name__)

FUNCTION = "metis_cosine_distance"
SOURCE = Path(__file__).resolve().with_name("cosine_kernel.c")
#: dsn -> whether the function is there and made of this machine's library (asked once per process).
_ready: dict[str, bool] = {}


def _cache_folder() -> Path:
    return Path(f"/var/tmp/metis-kernel-{os.getuid()}")


def library(bin_path: Path) -> Path | None:
    """Return this machine's build of the kernel for the server in `bin_path`, building it if needed;
    None when it cannot be built (no C compiler, no server headers: the reason is logged)."""
    pg_config = bin_path / "pg_config"
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler or not pg_config.exists():
        log.info("the cosine kernel is not built: %s", "no C compiler (cc)" if not compiler else f"no {pg_config}")
        return None
    # The build's name says what it was built from (no subprocess: a search asks this each process).
    made_of = f"{SOURCE.read_text(encoding='utf-8')}\0{pg_config.resolve()}\0{pg_config.stat().st_mtime_ns}\0{compiler}"
    key = hashlib.sha256(made_of.encode()).hexdigest()[:16]
    folder = _cache_folder()
    target = folder / f"cosine_kernel-{key}.so"
    if target.exists():
        return target
    try:
        folder.mkdir(mode=0o755, exist_ok=True)
        if folder.stat().st_uid != os.getuid() or folder.stat().st_mode & 0o022:
            log.info("the cosine kernel is not built: %s is not this user's alone", folder)
            return None
        folder.chmod(0o755)  # the server's own user (pgserver, under root) reads the library
        include = subprocess.run([str(pg_config), "--includedir-server"], capture_output=True, text=True,
                                 check=True, timeout=30).stdout.strip()
        with tempfile.TemporaryDirectory(dir=folder) as scratch:
            built = Path(scratch) / "kernel.so"
            done = subprocess.run([compiler, "-O2", "-fPIC", "-shared", "-Wno-psabi", f"-I{include}", "-o",
                                   str(built), str(SOURCE)], capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                log.info("the cosine kernel is not built: %s", (done.stderr or done.stdout).strip()[-500:])
                return None
            built.chmod(0o644)
            os.replace(built, target)  # whole or not at all, whoever builds it at the same moment
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("the cosine kernel is not built: %s", exc)
        return None
    return target


def ensure(conn: psycopg.Connection, bin_path: Path) -> bool:
    """Make ``metis_cosine_distance`` of `conn`'s database this machine's build of the kernel; return
    whether searches may call it. Asked once per process and database: a catalog look-up on `conn`
    (in a savepoint of its transaction), and at most a build and, on a connection of its own in
    autocommit (so that the search's transaction ending does not undo it), a ``CREATE OR REPLACE
    FUNCTION`` under an advisory lock. Never raises: False keeps pgvector's ``<=>``.
    """
    key = f"{conn.info.host}:{conn.info.port}/{conn.info.dbname}"
    if key in _ready:
        return _ready[key]
    ready = False
    try:
        with conn.transaction():
            current, has_halfvec = conn.execute(sqlfiles.load("kernel/installed")).fetchone()
        built = library(bin_path) if has_halfvec else None
        if built is not None and current == str(built):
            ready = True
        elif built is not None:
            with psycopg.connect(conn.info.dsn, autocommit=True) as admin, admin.transaction():
                admin.execute("SELECT pg_advisory_xact_lock(hashtext('metis_pg.cosine_kernel'))")
                admin.execute(sql.SQL(sqlfiles.load("kernel/create")).format(library=sql.Literal(str(built))))
            ready = True
    except psycopg.errors.InsufficientPrivilege as exc:  # a role that may not create C functions
        log.info("the cosine kernel is not used (pgvector's <=> is): %s", exc)
    except psycopg.Error as exc:
        log.warning("the cosine kernel is not used (pgvector's <=> is): %s", exc)
    _ready[key] = ready
    return ready
