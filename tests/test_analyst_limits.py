"""The analyst role's members get a connection limit and a statement_timeout (issue 26, item 8).

Members of metis_analyst could take 94 of 100 connections and sleep without end.
Now a login event trigger (migration 0014) gives each member's session the
analyst statement_timeout and refuses one login more than the limit; the
service still connects.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from metis_pg.config import Settings
import metis_pg
from metis_pg import analyst


@pytest.fixture()
def alice(metis: metis_pg.Metis) -> Iterator[str]:
    """A login member of metis_analyst; the limits set to 2 connections and 0.5 s; restored after."""
    name = f"alice_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(metis.pool.conninfo, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{name}" LOGIN')
        admin.execute(f'GRANT metis_analyst TO "{name}"')
        analyst.apply_limits(admin, max_connections=2, statement_timeout_s=0.5, settings=Settings.from_env())
    try:
        yield make_conninfo(metis.pool.conninfo, user=name)
    finally:
        with psycopg.connect(metis.pool.conninfo, autocommit=True) as admin:
            analyst.apply_limits(admin, settings=Settings.from_env())
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,))
            admin.execute(f'DROP ROLE "{name}"')


def test_the_analyst_members_get_a_connection_limit_and_a_statement_timeout(metis, alice):
    first, second = psycopg.connect(alice, autocommit=True), psycopg.connect(alice, autocommit=True)
    try:
        with pytest.raises(psycopg.OperationalError, match="too many analyst connections: members of "
                                                          "metis_analyst hold 2 of at most 2"):
            psycopg.connect(alice)
        # The service still connects and searches; its sessions are not limited.
        assert metis.list_bases() is not None
        with metis.pool.connection() as conn:
            assert conn.execute("SHOW statement_timeout").fetchone()[0] != "500ms"
        assert first.execute("SHOW statement_timeout").fetchone() == ("500ms",)
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            first.execute("SELECT pg_sleep(30)")
        assert time.monotonic() - started < 5
        assert first.execute("SELECT count(*) FROM metis.base_health").fetchone()[0] >= 0  # still an analyst
    finally:
        first.close()
        second.close()
    psycopg.connect(alice).close()  # a slot freed is a login allowed again


def test_the_limits_come_from_the_settings_at_each_upgrade(dsn, monkeypatch):
    from metis_pg import migrate

    monkeypatch.setenv("METIS_ANALYST_MAX_CONNECTIONS", "7")
    monkeypatch.setenv("METIS_ANALYST_STATEMENT_TIMEOUT_S", "12.5")
    migrate.upgrade(dsn, settings=Settings.from_env())
    monkeypatch.undo()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT max_connections, statement_timeout_ms FROM analyst_limits").fetchone() == (7, 12500)
    migrate.upgrade(dsn, settings=Settings.from_env())
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT max_connections, statement_timeout_ms FROM analyst_limits").fetchone() == (10, 60000)


def test_an_analyst_who_lifts_the_statement_timeout_is_still_cancelled_by_the_watchdog(metis, alice, caplog):
    """A member may SET statement_timeout = 0 (a user setting); the watchdog cancels it anyway."""
    from metis_pg.analyst import AnalystWatchdog

    with psycopg.connect(alice, autocommit=True) as session:
        session.execute("SET statement_timeout = 0")
        # Without the watchdog the lifted timeout holds: 1.5 s runs past the 0.5 s limit.
        session.execute("SELECT pg_sleep(1.5)")
        watchdog = AnalystWatchdog(metis.pool, interval_s=0.2).start()
        try:
            started = time.monotonic()
            with pytest.raises(psycopg.errors.QueryCanceled, match="canceling statement due to user request"):
                session.execute("SELECT pg_sleep(30)")
            took = time.monotonic() - started
        finally:
            watchdog.stop()
        assert 0.5 <= took < 5
        assert session.execute("SELECT 1").fetchone() == (1,)  # cancelled, not disconnected
    assert any("analyst watchdog: cancelled the statement of alice_" in r.getMessage() for r in caplog.records)


def test_the_watchdog_leaves_the_service_and_short_statements_alone(metis, alice):
    from metis_pg.analyst import AnalystWatchdog

    with psycopg.connect(metis.pool.conninfo, autocommit=True) as service, \
            psycopg.connect(alice, autocommit=True) as session:
        session.execute("SET statement_timeout = 0")
        service.execute("SET statement_timeout = 0")
        # The service's own statement runs past the analysts' 0.5 s and is not touched.
        watchdog = AnalystWatchdog(metis.pool, interval_s=0.1).start()
        try:
            service.execute("SELECT pg_sleep(1.2)")
            session.execute("SELECT pg_sleep(0.2)")
        finally:
            watchdog.stop()


def test_metis_serve_runs_the_watchdog(metis, alice, monkeypatch):
    """The HTTP service's lifespan starts the watchdog and stops it at shutdown."""
    from fastapi.testclient import TestClient

    from metis_pg.config import Settings
    from metis_pg.service.app import create_app

    app = create_app(metis, tokens="", settings=Settings(analyst_watchdog_interval_s=0.2))
    with TestClient(app, base_url="http://127.0.0.1"):
        with psycopg.connect(alice, autocommit=True) as session:
            session.execute("SET statement_timeout = 0")
            started = time.monotonic()
            with pytest.raises(psycopg.errors.QueryCanceled):
                session.execute("SELECT pg_sleep(30)")
            assert time.monotonic() - started < 5
    assert app.state.analyst_watchdog._thread is None


@pytest.mark.parametrize("signal_backend", [True, False], ids=["pg_signal_backend", "no-privilege"])
def test_the_watchdog_of_a_service_role_that_is_not_a_superuser(metis, alice, caplog, signal_backend):
    """A server of your own: the service connects as an ordinary role. With pg_read_all_stats and
    pg_signal_backend it cancels the analysts' statements; without, one WARNING names the grants."""
    import logging

    from metis_pg import db
    from metis_pg.analyst import AnalystWatchdog
    from metis_pg.config import Settings

    service_role = f"svc_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(metis.pool.conninfo, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{service_role}" LOGIN')
        admin.execute(f'GRANT SELECT ON analyst_limits TO "{service_role}"')
        if signal_backend:
            admin.execute(f'GRANT pg_read_all_stats, pg_signal_backend TO "{service_role}"')
    pool = db.Pool(make_conninfo(metis.pool.conninfo, user=service_role), settings=Settings())
    watchdog = AnalystWatchdog(pool, interval_s=0.2)
    try:
        with psycopg.connect(alice, autocommit=True) as session, caplog.at_level(logging.WARNING):
            session.execute("SET statement_timeout = 0")
            watchdog.start()
            started = time.monotonic()
            if signal_backend:
                with pytest.raises(psycopg.errors.QueryCanceled):
                    session.execute("SELECT pg_sleep(30)")
                assert time.monotonic() - started < 5
            else:
                session.execute("SELECT pg_sleep(1.5)")  # not cancelled: the role may not
                watchdog.stop()
                warnings = [r.getMessage() for r in caplog.records if "analyst watchdog" in r.getMessage()]
                assert len(warnings) == 1 and "grant it pg_read_all_stats and pg_signal_backend" in warnings[0], warnings
    finally:
        watchdog.stop()
        pool.close()
        with psycopg.connect(metis.pool.conninfo, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (service_role,))
            admin.execute(f'REVOKE SELECT ON analyst_limits FROM "{service_role}"')
            admin.execute(f'DROP ROLE "{service_role}"')
