"""A Citus cluster for the tests: METIS_CITUS_URL names its coordinator (docs/scaling.md).

Nothing here builds or starts Citus: a developer runs a coordinator and workers by hand
(docs/scaling.md, "Run it here") and exports the coordinator's URL. :func:`fresh_schema`
empties its database of metis objects and runs the deployment steps of
docker/compose.citus.yaml on it: ``metis db upgrade``, then ``sql/citus/keys.sql`` and
``sql/citus/distribute.sql`` with psql.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psycopg
import pytest

from metis_pg.config import Settings
from metis_pg import migrate
from metis_pg.db import standby as local_standby

URL = os.environ.get("METIS_CITUS_URL")
CITUS = Path(__file__).resolve().parents[1] / "sql" / "citus"

needs_citus = pytest.mark.skipif(
    not URL, reason="METIS_CITUS_URL is not set: no Citus cluster to run on (docs/scaling.md, 'Run it here')")


def _drop_everything(url: str) -> None:
    """Drop the metis tables, functions, sequences and the metis schema (the extensions stay)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS metis CASCADE")
        tables = [r[0] for r in conn.execute(
            "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public'")]
        if tables:
            conn.execute(f"DROP TABLE IF EXISTS {', '.join(tables)} CASCADE")
        for (signature,) in conn.execute(
                "SELECT p.oid::regprocedure::text FROM pg_proc AS p"
                " WHERE p.pronamespace = 'public'::regnamespace AND NOT EXISTS"
                " (SELECT 1 FROM pg_depend AS d WHERE d.objid = p.oid AND d.deptype = 'e')").fetchall():
            conn.execute(f"DROP FUNCTION IF EXISTS {signature} CASCADE")
        for (name,) in conn.execute(
                "SELECT quote_ident(sequence_name) FROM information_schema.sequences"
                " WHERE sequence_schema = 'public'").fetchall():
            conn.execute(f"DROP SEQUENCE IF EXISTS {name} CASCADE")


def psql(url: str, *files: Path) -> str:
    """Run SQL files with the embedded server's psql (``-v ON_ERROR_STOP=1``); return its output.

    Raises:
        AssertionError: psql failed (its output in the message).
    """
    done = subprocess.run([str(local_standby._bin_path() / "psql"), "-X", "-v", "ON_ERROR_STOP=1", "-d", url,
                           *[a for f in files for a in ("-f", str(f))]],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def fresh_schema(url: str) -> str:
    """Empty the cluster's database, migrate it and distribute the tables by base_id; return
    the output of distribute.sql (the table of pg_dist_partition)."""
    _drop_everything(url)
    migrate.upgrade(url, settings=Settings.from_env())
    return psql(url, CITUS / "keys.sql", CITUS / "distribute.sql")


def partitions(url: str) -> dict[str, tuple[str, int]]:
    """``{table: (partmethod, colocationid)}`` of pg_dist_partition."""
    with psycopg.connect(url) as conn:
        return {t: (m, c) for t, m, c in conn.execute(
            "SELECT logicalrelid::text, partmethod::text, colocationid FROM pg_dist_partition")}
