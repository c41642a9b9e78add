"""Issue 12: read replicas that really replicate (metis_pg.replicas).

One primary and one streaming standby for the whole module, both PostgreSQL 18 of the
embedded server's binaries: the primary is an embedded server; the standby is made by
``replicas.create_standby`` (``pg_basebackup -R -X stream -C -S <slot>``), exactly what
``metis db replica create`` runs. Bases use the hashed bag-of-words embedder over real
HTTP (fast) so that hybrid searches run both legs.

To hold the standby back without stopping it, its replay is paused
(``pg_wal_replay_pause()``): WAL still streams in, nothing is applied.
Waits are polls with deadlines, never fixed sleeps.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import metis_pg
from metis_pg import migrate, replicas, service
from metis_pg.db import standby as local_standby
from metis_pg.config import Settings

import hash_embedder
from cli_runner import run_cli
from corpus import write_corpus
from model_servers import free_port
from pg_servers import embedded_server

TOKEN = "replica-test-token-" + "5" * 20
CORPUS = {
    "harbour.txt": "The harbour master keeps the lantern lit at night for the fishing boats.",
    "orchard.md": "# Orchard\n\nThe orchard gives copper apples in autumn; the cider press runs in October.",
    "kiln.txt": "The kiln schedule: bisque firing on Tuesday, glaze firing on Friday.",
}


def settings(**over: Any) -> Settings:
    """A check every 0.1 s, a consistent read waits at most 3 s; a lag of a minute is tolerated
    (a paused standby must not be skipped for lag on a slow machine unless a test says so)."""
    return Settings(**{"database_wait_s": 3.0, "replica_check_interval_s": 0.1, "replica_max_lag_s": 60.0,
                       "replica_consistent_wait_s": 3.0, **over})


def poll(what: str, check: Callable[[], Any], timeout_s: float = 30) -> Any:
    """Call `check` until it returns something true; return it. Fails after `timeout_s` naming `what`."""
    deadline = time.monotonic() + timeout_s
    pause = 0.01
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


# -- one primary and one standby for the module ---------------------------------------------------


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[str, str, Path]]:
    """(primary URI, standby URL, standby folder): a streaming standby of a migrated embedded primary."""
    with embedded_server("replicas") as (primary, pgdata):
        migrate.upgrade(primary, settings=Settings.from_env())
        folder = pgdata.parent / "standby"
        standby = replicas.create_standby(primary, folder)
        try:
            yield primary, standby, folder
        finally:
            replicas.remove_standby(folder, primary, settings=Settings.from_env())


@pytest.fixture(scope="module")
def hash_url() -> Iterator[str]:
    with hash_embedder.serve() as url:
        yield url


@pytest.fixture(scope="module")
def routed(pair) -> Iterator[metis_pg.Metis]:
    """A Metis whose reads go to the standby."""
    primary, standby, _ = pair
    with metis_pg.Metis(primary, read_dsns=[standby], settings=settings()) as m:
        yield m


@pytest.fixture(scope="module")
def direct(pair) -> Iterator[metis_pg.Metis]:
    """A Metis on the primary only (no replicas)."""
    with metis_pg.Metis(pair[0], settings=settings()) as m:
        yield m


@pytest.fixture(scope="module")
def base(routed, hash_url, tmp_path_factory) -> str:
    routed.create_base("kb", embedding_model="hash-words", embedding_url=hash_url, embedding_dim=hash_embedder.DIM)
    routed.index("kb", write_corpus(tmp_path_factory.mktemp("kb") / "kb", CORPUS))
    return "kb"


def sql(url: str, statement: str, params: Any = None) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def replica_requests(m: metis_pg.Metis) -> int:
    """Connections lent by the replica's pool so far (0 when it has none open)."""
    pool = m.replicas.replicas[0].pool
    return pool.get_stats().get("requests_num", 0) if pool is not None else 0


def ranked(answer) -> list[tuple[str, int, float]]:
    return [(r.citation.document, r.chunk_id, round(r.scores.fused, 9)) for r in answer.results]


class paused_replay:
    """``with paused_replay(standby):`` the standby receives WAL but applies none of it."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> paused_replay:
        sql(self.url, "SELECT pg_wal_replay_pause()")
        poll("replay paused", lambda: sql(self.url, "SELECT pg_get_wal_replay_pause_state()")[0][0] == "paused")
        return self

    def __exit__(self, *exc: object) -> None:
        sql(self.url, "SELECT pg_wal_replay_resume()")


def caught_up(primary: str, standby: str) -> bool:
    lsn = sql(primary, "SELECT pg_current_wal_lsn()::text")[0][0]
    return sql(standby, "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,))[0][0]


# -- the standby itself ------------------------------------------------------------------------------


def test_create_standby_makes_a_streaming_standby_with_a_slot(pair):
    primary, standby, folder = pair

    assert sql(standby, "SELECT pg_is_in_recovery()") == [(True,)]
    assert (folder / "standby.signal").exists()
    assert sql(primary, "SELECT slot_name FROM pg_replication_slots") == [(local_standby._slot_name(folder.resolve()),)]
    poll("the slot in use", lambda: sql(primary, "SELECT active FROM pg_replication_slots") == [(True,)])
    poll("the standby streams", lambda: sql(primary, "SELECT state FROM pg_stat_replication") == [("streaming",)])
    sql(primary, "CREATE TABLE replica_probe (n int); INSERT INTO replica_probe VALUES (42)")
    poll("the row replayed", lambda: caught_up(primary, standby))
    assert sql(standby, "SELECT n FROM replica_probe") == [(42,)]


def test_create_standby_refuses_a_folder_that_is_not_empty(pair, tmp_path):
    (tmp_path / "x").write_text("x")
    with pytest.raises(metis_pg.InvalidInput, match="not empty"):
        replicas.create_standby(pair[0], tmp_path)


# -- reads on the standby ------------------------------------------------------------------------------


def test_a_search_on_the_standby_gives_the_primarys_results(pair, routed, direct, base):
    poll("the standby caught up", lambda: caught_up(pair[0], pair[1]))
    before = replica_requests(routed)

    for mode in ("hybrid", "keyword", "dense"):
        on_standby = routed.search(base, "kiln glaze firing schedule", mode=mode, top_k=3)
        on_primary = direct.search(base, "kiln glaze firing schedule", mode=mode, top_k=3)
        assert on_standby.warnings == on_primary.warnings == ()
        assert ranked(on_standby) == ranked(on_primary) and on_standby.results
        if mode != "dense":  # hashed words are no semantic model: only the keyword legs pick the kiln for sure
            assert on_standby.results[0].citation.document == "kiln.txt"

    assert replica_requests(routed) >= before + 3  # the reads were the standby's
    compared = routed.compare(base, "cider press", top_k=2)
    assert compared.warnings == () and compared.passages[0].citation.document == "orchard.md"
    assert [b.name for b in routed.list_bases()] == ["kb"] and routed.base(base).chunks == 3


def test_a_search_is_counted_on_the_primary_not_the_standby(pair, routed, base):
    count = "SELECT coalesce(sum(searches), 0) FROM search_counts"
    before = sql(pair[0], count)[0][0]

    answer = routed.search(base, "lantern", mode="keyword")

    assert answer.warnings == ()  # a count written on the read-only standby would have failed the read there
    assert sql(pair[0], count)[0][0] == before + 1


def test_reads_of_a_paused_standby_are_stale_and_a_consistent_search_falls_back_to_the_primary(
        pair, routed, base, tmp_path):
    primary, standby, _ = pair
    poll("the standby caught up", lambda: caught_up(primary, standby))
    with paused_replay(standby):
        routed.index(base, write_corpus(tmp_path / "late", {"bell.txt": "The bell tower rings a zinc bell at noon."}))

        stale = routed.search(base, "zinc bell", mode="keyword")
        fresh = routed.search(base, "zinc bell", mode="keyword", consistent=True)

    assert stale.warnings == () and "bell.txt" not in [r.citation.document for r in stale.results]
    assert fresh.results[0].citation.document == "bell.txt"
    codes = [w.code for w in fresh.warnings]
    assert codes == ["REPLICA_SKIPPED", "READ_FROM_PRIMARY"], fresh.warnings
    assert "had not replayed the primary's latest writes within 3 s" in fresh.warnings[0].message


def test_a_consistent_search_waits_for_the_standby_to_replay_the_writes(pair, base, tmp_path):
    primary, standby, _ = pair
    answers: list = []
    # A long wait, so that a slow machine cannot make the search give up before the replay resumes.
    with metis_pg.Metis(primary, read_dsns=[standby], settings=settings(replica_consistent_wait_s=60)) as routed:
        with paused_replay(standby):
            routed.index(base, write_corpus(tmp_path / "late2", {"mill.txt": "The water mill grinds rye flour."}))
            before = replica_requests(routed)
            search = threading.Thread(target=lambda: answers.append(
                routed.search(base, "rye flour mill", mode="keyword", consistent=True)))
            search.start()
            poll("the search waits on the standby", lambda: sql(
                standby, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE %s AND state <> 'idle'"
                         " AND pid <> pg_backend_pid()",
                ("%pg_last_wal_replay_lsn() >=%",))[0][0] > 0, timeout_s=30)
        search.join(60)
        after = replica_requests(routed)

    assert answers and answers[0].warnings == ()  # the standby answered, once it had replayed
    assert answers[0].results[0].citation.document == "mill.txt"
    assert after > before


def test_a_lagging_standby_is_skipped_with_a_warning_and_its_lag_is_reported(pair, base, tmp_path, hash_url):
    primary, standby, _ = pair
    with metis_pg.Metis(primary, read_dsns=[standby], settings=settings(replica_max_lag_s=0.3)) as m:
        poll("the standby caught up", lambda: caught_up(primary, standby))
        assert m.search(base, "lantern", mode="keyword").warnings == ()
        # The search's count was just written on the primary: once replayed, the lag reads 0.
        poll("a lag of 0 once caught up", lambda: [(s.status, s.lag_s, s.behind_bytes) for s in m.replica_status()]
             == [("ok", 0.0, 0)])
        with paused_replay(standby):
            m.add_note(base, "Ferry", "The ferry leaves at dawn.")  # a write the standby will not apply

            lagging = poll("the lag over 0.3 s", lambda: [s for s in m.replica_status() if s.status == "lagging"])
            answer = m.search(base, "ferry dawn", mode="keyword")

        assert lagging[0].lag_s > 0.3 and lagging[0].behind_bytes > 0
        assert "lags" in lagging[0].error and "replica_max_lag_s" in lagging[0].error
        assert [w.code for w in answer.warnings] == ["REPLICA_SKIPPED", "READ_FROM_PRIMARY"]
        assert lagging[0].name in answer.warnings[0].message
        assert answer.results[0].citation.document.startswith("notes/")  # the primary has the note
        poll("the standby back in use", lambda: m.search(base, "ferry", mode="keyword").warnings == ())


def test_a_base_the_standby_does_not_have_yet_is_read_on_the_primary(pair, routed, base, hash_url):
    standby = pair[1]
    with paused_replay(standby):
        routed.create_base("newer", embedding_model="hash-words", embedding_url=hash_url,
                           embedding_dim=hash_embedder.DIM)
        try:
            info = routed.base("newer")
            answer = routed.search(["newer"], "anything", mode="keyword")
        finally:
            routed.drop_base("newer")

    assert info.name == "newer"
    assert answer.results == () and "REPLICA_SKIPPED" in [w.code for w in answer.warnings]
    assert "newer" in answer.warnings[0].message


def test_a_replica_url_that_is_no_standby_is_skipped(pair, base):
    primary = pair[0]
    # The same server under another URL (not the primary's own, which takes its turn of the reads).
    not_a_standby = make_conninfo(primary, application_name="not-a-standby")
    with metis_pg.Metis(primary, read_dsns=[not_a_standby], settings=settings()) as m:
        answer = m.search(base, "lantern", mode="keyword")
        [status] = m.replica_status()

    assert status.status == "not_standby"
    assert [w.code for w in answer.warnings] == ["REPLICA_SKIPPED", "READ_FROM_PRIMARY"]
    assert "not a standby" in answer.warnings[0].message


def test_the_primary_listed_among_the_read_urls_takes_its_turn(pair, base):
    primary, standby, _ = pair
    poll("the standby caught up", lambda: caught_up(primary, standby))
    with metis_pg.Metis(primary, read_dsns=[primary, standby], settings=settings()) as m:
        answers = [m.search(base, "lantern", mode="keyword") for _ in range(4)]
        on_primary = m.pool.get_stats().get("requests_num", 0)
        on_standby = m.replicas.replicas[1].pool.get_stats().get("requests_num", 0)
        statuses = m.replica_status()

    assert all(a.warnings == () for a in answers)
    assert [s.status for s in statuses] == ["ok", "ok"] and statuses[0].lag_s == 0.0  # the primary itself
    assert statuses[1].lag_s < 60  # the standby: just behind the counts written meanwhile, at most
    # two searches each (two checkouts per search where it reads), and all four counts on the primary
    assert on_standby >= 2 * 2 and on_primary >= 2 * 2 + 4


def test_the_replica_name_never_shows_a_password():
    assert replicas.replica_label("postgresql://metis:s3cret@db2:5433/metis") == "db2:5433/metis"
    assert "s3cret" not in replicas.replica_label("host=db3 password=s3cret dbname=x")


# -- HTTP and the command line ------------------------------------------------------------------------


def test_http_healthz_shows_the_lag_and_search_takes_consistent(pair, routed, base, tmp_path):
    app = service.create_app(routed, tokens=[TOKEN], source_roots=[tmp_path])
    with service.running(app) as url:
        health = httpx.get(f"{url}/healthz", timeout=30).json()
        with paused_replay(pair[1]):
            routed.add_note(base, "Pier", "The pier lamp is green.")
            found = httpx.post(f"{url}/search", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30,
                               json={"bases": base, "question": "green pier lamp", "mode": "keyword",
                                     "consistent": True}).json()

    [replica] = health["replicas"]
    assert replica["status"] == "ok" and replica["lag_s"] is not None and replica["lag_s"] >= 0
    assert replica["name"].endswith("/postgres") and replica["error"] is None
    assert found["results"][0]["citation"]["document"].startswith("notes/")
    assert [w["code"] for w in found["warnings"]] == ["REPLICA_SKIPPED", "READ_FROM_PRIMARY"]


def test_metis_db_replica_create_then_status_and_consistent_search(pair, base, tmp_path, monkeypatch):
    primary, _, _ = pair
    folder = tmp_path / "second"
    created = run_cli("db", "replica", "create", str(folder), "--dsn", primary)
    assert created.code == 0, created.stderr
    url = created.stdout.strip()
    try:
        assert url == replicas.standby_url(folder) and sql(url, "SELECT pg_is_in_recovery()") == [(True,)]
        monkeypatch.setenv("METIS_READ_DATABASE_URLS", url)

        status = run_cli("status", "--dsn", primary)
        found = run_cli("search", base, "lantern", "--mode", "keyword", "--consistent", "--json", "--dsn", primary)
        stopped = run_cli("db", "replica", "stop", str(folder))
        skipped = run_cli("search", base, "lantern", "--mode", "keyword", "--json", "--dsn", primary)
    finally:
        replicas.remove_standby(folder, primary, settings=Settings.from_env())

    assert status.code == 0, status.stderr
    assert f"replica {replicas.replica_label(url)}: ok · lag " in status.stdout
    assert found.code == 0 and found.json()["warnings"] == [], found.stdout
    assert found.json()["results"][0]["citation"]["document"] == "harbour.txt"
    assert stopped.code == 0, stopped.stderr
    assert [w["code"] for w in skipped.json()["warnings"]] == ["REPLICA_SKIPPED", "READ_FROM_PRIMARY"]
    assert skipped.json()["results"][0]["citation"]["document"] == "harbour.txt"
    assert len(sql(primary, "SELECT 1 FROM pg_replication_slots")) == 1  # the second one's slot is dropped


# -- last: the standby goes away -------------------------------------------------------------------------


def test_a_stopped_standby_sends_searches_to_the_primary_with_a_warning_then_back(pair, routed, direct, base):
    primary, standby, folder = pair
    poll("the standby caught up", lambda: caught_up(primary, standby))
    expected = ranked(direct.search(base, "copper apples", top_k=3))
    replicas.stop_standby(folder)
    try:
        answer = routed.search(base, "copper apples", top_k=3)
        [status] = routed.replica_status()
    finally:
        replicas.start_standby(folder)

    assert ranked(answer) == expected
    assert [w.code for w in answer.warnings] == ["REPLICA_SKIPPED", "READ_FROM_PRIMARY"]
    assert answer.warnings[0].message.startswith(f"replica {status.name} skipped: ")
    assert status.status == "unavailable" and status.lag_s is None and status.error
    back = poll("searches on the standby again", lambda: (a := routed.search(base, "copper apples", top_k=3))
                .warnings == () and a, timeout_s=30)
    assert ranked(back) == expected


# -- the primary goes away (its own pair: the module's primary stays up) -------------------------------

#: The primary's database_wait_s in the primary-down tests.
DOWN_WAIT_S = 2.0


@pytest.fixture(scope="module")
def primary_down(hash_url, tmp_path_factory) -> Iterator[tuple[str, str, Path]]:
    """(primary URL, standby URL, the indexed folder): base ``kb`` indexed on a primary that was then
    stopped hard (``pg_ctl -m immediate``) once its streaming standby had caught up."""
    with embedded_server("replicas-down") as (embedded, pgdata):
        migrate.upgrade(embedded, settings=Settings.from_env())
        folder = pgdata.parent / "standby"
        standby = replicas.create_standby(embedded, folder)
        # Another spelling of the primary's URL: not the embedded server this process started, so
        # that no pool restarts it (a primary elsewhere that went down).
        primary = embedded + "&application_name=metis-primary"
        corpus = write_corpus(tmp_path_factory.mktemp("down") / "kb", CORPUS)
        try:
            with metis_pg.Metis(primary, settings=settings()) as writer:
                writer.create_base("kb", embedding_model="hash-words", embedding_url=hash_url,
                                   embedding_dim=hash_embedder.DIM)
                writer.index("kb", corpus)
            poll("the standby caught up", lambda: caught_up(primary, standby))
            local_standby._run("pg_ctl", ["-w", "-D", str(pgdata), "-m", "immediate", "stop"])
            yield primary, standby, corpus
        finally:
            replicas.remove_standby(folder, settings=Settings.from_env())


def test_with_the_primary_stopped_hard_reads_come_from_the_standby_and_writes_fail_at_once(
        primary_down, tmp_path, monkeypatch):
    primary, standby, corpus = primary_down
    wait_s = DOWN_WAIT_S

    started = time.monotonic()
    with metis_pg.connect(primary, read_dsns=[standby], settings=settings(database_wait_s=wait_s)) as m:
        answer = m.search("kb", "kiln glaze firing schedule", mode="keyword")
        first_s = time.monotonic() - started
        hybrid = m.search("kb", "kiln glaze firing schedule")
        compared = m.compare("kb", "cider press", top_k=2)
        listed = m.list_bases()
        documents = m.documents("kb")
        text = m.get("kb", "orchard.md")
        [status] = m.replica_status()
        t0 = time.monotonic()
        with pytest.raises(metis_pg.DatabaseUnavailable):
            m.add_note("kb", "Pier", "The pier lamp is green.")
        write_s = time.monotonic() - t0
        app = service.create_app(m, tokens=[TOKEN], source_roots=[tmp_path])
        with service.running(app) as url:
            found = httpx.post(f"{url}/search", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30,
                               json={"bases": "kb", "question": "copper apples", "mode": "keyword"})
            health = httpx.get(f"{url}/healthz", timeout=30)
            # What the console's pages read (metis_pg/service/console: GET /bases, then searches).
            console = httpx.get(f"{url}/bases", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    monkeypatch.setenv("METIS_READ_DATABASE_URLS", standby)
    monkeypatch.setenv("METIS_DATABASE_WAIT_S", str(wait_s))
    cli = run_cli("search", "kb", "lantern", "--mode", "keyword", "--json", "--dsn", primary)
    cli_status = run_cli("status", "--dsn", primary)
    cli_ls = run_cli("ls", "kb", "--dsn", primary)
    cli_index = run_cli("index", str(corpus), "--base", "kb", "--dsn", primary)

    assert answer.results[0].citation.document == "kiln.txt"
    assert "PRIMARY_UNAVAILABLE" in [w.code for w in answer.warnings], answer.warnings
    assert first_s < wait_s + 2.0, first_s  # the primary is waited for at most database_wait_s
    assert hybrid.results and "PRIMARY_UNAVAILABLE" in [w.code for w in hybrid.warnings]
    assert compared.passages[0].citation.document == "orchard.md"
    assert [b.name for b in listed] == ["kb"] and listed[0].documents == 3
    assert sorted(d.document for d in documents) == sorted(CORPUS) and "copper apples" in text[0].text
    assert status.status == "ok" and status.lag_s is None
    assert write_s < 0.5, write_s  # the primary's failure is known: the write fails at once
    assert found.status_code == 200, found.text
    assert found.json()["results"][0]["citation"]["document"] == "orchard.md"
    assert "PRIMARY_UNAVAILABLE" in [w["code"] for w in found.json()["warnings"]]
    assert health.status_code == 200 and health.json()["status"] == "degraded", health.text
    assert health.json()["replicas"][0]["status"] == "ok"
    assert console.status_code == 200 and [b["name"] for b in console.json()["bases"]] == ["kb"]
    assert cli.code == 0, cli.stderr
    assert cli.json()["results"][0]["citation"]["document"] == "harbour.txt"
    assert "PRIMARY_UNAVAILABLE" in [w["code"] for w in cli.json()["warnings"]]
    assert cli_status.code == 0 and "kb" in cli_status.stdout, cli_status.stderr
    assert cli_ls.code == 0 and "kiln.txt" in cli_ls.stdout, cli_ls.stderr
    assert cli_index.code == 5 and "DATABASE_UNAVAILABLE" in cli_index.stderr + cli_index.stdout, cli_index


def test_with_the_primary_down_a_consistent_search_says_why_it_cannot_answer(primary_down, monkeypatch):
    primary, standby, _ = primary_down
    why = r"consistent read .* cannot be answered: it needs the primary's latest WAL position"

    with metis_pg.connect(primary, read_dsns=[standby], settings=settings(database_wait_s=DOWN_WAIT_S)) as m:
        plain = m.search("kb", "lantern", mode="keyword")
        with pytest.raises(metis_pg.DatabaseUnavailable, match=why) as refused:
            m.search("kb", "lantern", mode="keyword", consistent=True)
        app = service.create_app(m, tokens=[TOKEN], source_roots=[])
        with service.running(app) as url:
            http = httpx.post(f"{url}/search", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30,
                              json={"bases": "kb", "question": "lantern", "mode": "keyword", "consistent": True})
    monkeypatch.setenv("METIS_READ_DATABASE_URLS", standby)
    monkeypatch.setenv("METIS_DATABASE_WAIT_S", str(DOWN_WAIT_S))
    cli = run_cli("search", "kb", "lantern", "--mode", "keyword", "--consistent", "--dsn", primary)

    assert plain.results and "PRIMARY_UNAVAILABLE" in [w.code for w in plain.warnings]
    # It names the cause and what answers without it: the replica, by name, never a password.
    assert replicas.replica_label(standby) in refused.value.message
    assert "the primary cannot be reached (" in refused.value.message
    assert http.status_code == 503 and http.json()["error"]["code"] == "DATABASE_UNAVAILABLE", http.text
    assert "consistent read" in http.json()["error"]["message"]
    assert cli.code == 5, cli
    assert "DATABASE_UNAVAILABLE" in cli.stderr and "consistent read" in cli.stderr, cli.stderr


def test_metis_serve_starts_with_the_primary_down_and_serves_from_the_standby(primary_down, tmp_path):
    primary, standby, _ = primary_down
    port = free_port()
    env = {**os.environ, "METIS_READ_DATABASE_URLS": standby, "METIS_DATABASE_WAIT_S": str(DOWN_WAIT_S),
           "METIS_API_TOKENS": TOKEN, "METIS_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen([sys.executable, "-m", "metis_pg.cli", "serve", "--port", str(port), "--dsn", primary],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        def up() -> httpx.Response | None:
            assert proc.poll() is None, proc.communicate()[0]
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
            return None

        health = poll("metis serve answers /healthz", up, timeout_s=120)
        found = httpx.post(f"http://127.0.0.1:{port}/search", headers=auth, timeout=30,
                           json={"bases": "kb", "question": "copper apples", "mode": "keyword"})
        note = httpx.post(f"http://127.0.0.1:{port}/bases/kb/notes", headers=auth, timeout=30,
                          json={"title": "Pier", "text": "The pier lamp is green."})
    finally:
        proc.terminate()
        output = proc.communicate(timeout=60)[0]

    assert health.json()["status"] == "degraded" and health.json()["replicas"][0]["status"] == "ok", health.text
    assert found.status_code == 200, found.text
    assert found.json()["results"][0]["citation"]["document"] == "orchard.md"
    assert "PRIMARY_UNAVAILABLE" in [w["code"] for w in found.json()["warnings"]]
    assert note.status_code == 503 and note.json()["error"]["code"] == "DATABASE_UNAVAILABLE", note.text
    assert "the primary cannot be reached" in output and "not migrated" in output, output
