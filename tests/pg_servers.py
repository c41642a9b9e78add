"""Embedded PostgreSQL servers for the tests (not a test module)."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from metis_pg import db
from metis_pg.db import embedded


@contextmanager
def embedded_server(name: str) -> Iterator[tuple[str, Path]]:
    """Start an embedded PostgreSQL in a new folder of /var/tmp; yield (uri, pgdata); stop and delete it after.

    Not under pytest's basetemp: a second pytest session of the same user resets
    /tmp/pytest-of-<user> to 0700, and the server (run as the user pgserver) then
    loses its data folder. /var/tmp is world-traversable already.
    """
    home = Path(tempfile.mkdtemp(prefix=f"metis-test-{name}-", dir="/var/tmp"))
    pgdata = (home / "pgdata").resolve()
    try:
        yield db.embedded_dsn(pgdata), pgdata
    finally:
        server = embedded._servers.pop(pgdata, None)
        if server is not None:
            server.cleanup()  # stops it when this process is its only user
        shutil.rmtree(home, ignore_errors=True)


@contextmanager
def new_database(dsn: str, prefix: str) -> Iterator[str]:
    """Create an empty database named `prefix`_<8 hex> on the server of `dsn`; yield its URL; drop it
    after (WITH (FORCE): connections a test left open do not keep it)."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urlunsplit(urlsplit(dsn)._replace(path="/" + name))
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
