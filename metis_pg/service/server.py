"""Running the app with uvicorn: :func:`serve` (``metis serve``) and :func:`running` (tests, benchmarks).

Both run uvicorn with :func:`uvicorn_config`: its HTTP/1.1 protocol is
uvicorn's h11 one plus what uvicorn lacks (:class:`GuardedH11Protocol`): a
deadline for a request's headers (``request_read_timeout_s`` from the
connection or the request's first byte: a client trickling its headers is
answered 408 and dropped) and a cap on open connections (``max_connections``:
one more is answered 503 ``OVERLOADED`` and closed). Idle keep-alive
connections close after ``keep_alive_timeout_s``; the body's deadline is the
gate's (:mod:`metis_pg.service.gate`).

:func:`serve` also configures logging, so the service's own INFO lines (one per
search, one per indexing job) are printed with uvicorn's.
"""

from __future__ import annotations

import asyncio
import copy
import http
import json
import logging
import logging.config
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import h11
import uvicorn
from fastapi import FastAPI
from uvicorn.config import LOGGING_CONFIG
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..api import Metis, connect
from ..config import Settings
from ..errors import ConfigError, DatabaseUnavailable, MetisError, Overloaded, RequestTimeout
from .app import create_app
from .errors import error_headers
from .logs import RedactCredentials
from .settings import Limits, check_bind, is_loopback, parse_tokens

__all__ = ["serve", "running", "uvicorn_config", "service_log_config", "GuardedH11Protocol"]

log = logging.getLogger(__name__)


def raw_error(exc: MetisError) -> bytes:
    """Return a whole HTTP/1.1 error answer (``Connection: close``) for a connection with no request to answer."""
    body = json.dumps(exc.to_dict()).encode("utf-8")
    lines = [f"HTTP/1.1 {exc.http_status} {http.HTTPStatus(exc.http_status).phrase}",
             "content-type: application/json", f"content-length: {len(body)}", "connection: close"]
    lines += [f"{k.lower()}: {v}" for k, v in error_headers(exc).items() if k.lower() != "connection"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a headers deadline and a connection cap (see the module docstring).

    Configured by subclassing (:func:`uvicorn_config` does): uvicorn builds one
    instance per connection from the class alone.
    """

    #: Seconds from the connection, or from the first byte of a request, to its last header.
    header_timeout_s: float = 10.0
    #: Open connections at most.
    max_connections: int = 512

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        _no_delay(transport)
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            full = Overloaded(f"the service has {self.max_connections} connections open, its limit "
                              "(METIS_MAX_CONNECTIONS): retry in a second")
            transport.write(raw_error(full))
            transport.close()
            return
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and self.conn.their_state is h11.IDLE:
            self._arm_header_timer()  # the first byte of a new request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_late)

    def _disarm_header_timer(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
            self._header_timer = None

    def _headers_too_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        late = RequestTimeout(f"the request headers did not arrive within {self.header_timeout_s:g} s")
        self.transport.write(raw_error(late))
        self.transport.close()


def _no_delay(transport: asyncio.Transport) -> None:
    """Send small writes at once (TCP_NODELAY).

    asyncio sets it only on sockets whose ``proto`` is ``IPPROTO_TCP``; a listening
    socket made with ``socket.socket()`` (proto 0, as a passed socket or fd often is)
    accepts sockets without it, and then every answer (headers and body are two
    writes) waits ~40 ms for the client's delayed ACK.
    """
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


def service_log_config(level: str = "info") -> dict[str, Any]:
    """Return uvicorn's logging configuration plus the ``metis_pg`` loggers at `level`, on uvicorn's handler.

    Every other library's warnings (``psycopg.pool``: "discarding closed connection", ...) go to the
    same handler, one line each, through the root logger at WARNING. With no root handler the MCP
    SDK's ``MCPServer`` (the app's ``/mcp``) gave the root logger a ``rich`` handler at INFO
    (``logging.basicConfig``): those lines came out in another format, wrapped over several lines
    of 80 columns padded with spaces.
    """
    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["metis_pg"] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    config["root"] = {"handlers": ["default"], "level": "WARNING"}
    return config


def uvicorn_config(app: FastAPI, *, logging_config: dict[str, Any] | None = None, **options: Any) -> Any:
    """Return the ``uvicorn.Config`` that runs `app` with its limits (``app.state.limits``).

    `options` are further ``uvicorn.Config`` arguments (host, port, log_level, ...).
    """
    limits: Limits = app.state.limits
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactCredentials) for f in access.filters):
        access.addFilter(RedactCredentials())  # no token given in a URL reaches the access log
    protocol = type("MetisH11Protocol", (GuardedH11Protocol,), {
        "header_timeout_s": limits.request_read_timeout_s,
        "max_connections": limits.max_connections,
    })
    return uvicorn.Config(
        app, http=protocol, timeout_keep_alive=limits.keep_alive_timeout_s, log_config=logging_config,
        lifespan="on", server_header=False, proxy_headers=False, **options,
    )


def serve(
    metis: Metis | None = None,
    *,
    dsn: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8080,
    tokens: str | Sequence[str] | None = None,
    source_roots: str | Sequence[str | os.PathLike] | None = None,
    log_level: str = "info",
    watch: bool = False,
) -> None:
    """Run the service with uvicorn until interrupted (``metis serve``).

    With `watch` (``metis serve --watch``) a :class:`metis_pg.watch.Watcher` follows every base's
    folder sources in a thread of its own, indexing what changes, and stops with the server.

    The bind is checked before the database is opened: without a token only a
    loopback `host` is allowed. Logging goes to stderr (uvicorn's format): the
    access log, and the ``metis_pg`` loggers at `log_level`.

    Raises:
        ConfigError: `host` is not loopback and no token is configured; a bad setting.
    """
    token_list = parse_tokens(Settings.from_env().api_tokens if tokens is None else tokens)
    check_bind(host, token_list)
    logging_config = service_log_config(log_level)
    logging.config.dictConfig(logging_config)
    if metis is None:
        metis = open_for_serving(dsn)
    try:
        app = create_app(metis, tokens=token_list, source_roots=source_roots)
        limits: Limits = app.state.limits
        log.info("metis serve on %s:%d; tokens %s; source roots %s; at most %d searches at once, %d connections",
                 host, port, "required" if token_list else "off (loopback only)",
                 ":".join(str(r) for r in app.state.source_roots) or "none (indexing off)",
                 limits.max_inflight_searches, limits.max_connections)
        watcher = _start_watcher(metis) if watch else None
        try:
            server = uvicorn.Server(uvicorn_config(app, logging_config=logging_config, host=host, port=port,
                                                   log_level=log_level))
            with _hangup_stops(server):
                server.run()
        finally:
            if watcher is not None:
                watcher[0].stop()
                watcher[1].join(timeout=30)
    finally:
        metis.close()


@contextmanager
def _hangup_stops(server: "uvicorn.Server") -> Iterator[None]:
    """While `server` runs, SIGHUP (the terminal of ``metis serve`` closed, ``kill -HUP``) stops it
    as SIGTERM does: requests in flight answered, the database closed, the embedded server stopped.

    uvicorn handles SIGINT and SIGTERM only: a SIGHUP ended the process at once (exit 129), the
    embedded postmaster left running and the pending search counts lost.
    """
    import signal

    if not hasattr(signal, "SIGHUP") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGHUP, lambda _sig, frame: server.handle_exit(signal.SIGTERM, frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


def open_for_serving(dsn: str | None, settings: Settings | None = None) -> Metis:
    """Open the database for ``metis serve``: migrated to head (other commands only check the revision).

    With read replicas (``METIS_READ_DATABASE_URLS``) and the primary unreachable, the service
    still starts: nothing is migrated, the stored revision is read on a replica
    (:func:`metis_pg.connect`), and the log says so; reads are then answered by the replicas
    with ``PRIMARY_UNAVAILABLE``, writes with ``DATABASE_UNAVAILABLE`` (docs/scaling.md).

    Raises:
        DatabaseUnavailable: the primary cannot be reached and no replica answers, or a migration failed.
        SchemaOutOfDate: the primary is down and the replica's schema is not this code's.
    """
    from .. import migrate, replicas

    now = settings or Settings.from_env()
    try:
        return connect(dsn, upgrade=True, settings=settings)
    except DatabaseUnavailable as exc:
        if not replicas.parse_urls(now.read_database_urls) or not migrate.unreachable(exc):
            raise
        log.warning("the primary cannot be reached (%s): not migrated; the read replicas serve searches and"
                    " reads (PRIMARY_UNAVAILABLE), writes answer DATABASE_UNAVAILABLE until it is back",
                    exc.message)
    return connect(dsn, settings=settings)


def _start_watcher(metis: Metis):
    """Start a watcher of every base's folder sources in a daemon thread; (watcher, thread), or None
    when there is nothing to watch (said in the log)."""
    import threading

    from ..watch import Watcher

    targets = Watcher.targets_of(metis)
    if not targets:
        log.warning("metis serve --watch: no folder source to watch yet (index one, then restart)")
        return None

    def on_report(target, report, error) -> None:
        if error:
            log.warning("watch %s:%s: not indexed: %s", target.base, target.source, error)
        elif report.read or report.deleted or report.failed:
            log.info("watch %s:%s: %d read, %d deleted, %d failed%s", target.base, target.source, report.read,
                     report.deleted, len(report.failed), "".join(f"; skipped {f.path}: {f.reason}" for f in report.failed))

    watcher = Watcher(metis, targets, on_report=on_report)

    def run() -> None:
        try:
            watcher.run()
        except Exception:  # noqa: BLE001 - the server keeps serving; the log says why watching ended
            log.exception("metis serve --watch: the watcher stopped")

    thread = threading.Thread(target=run, name="metis-watch", daemon=True)
    thread.start()
    return watcher, thread


@contextmanager
def running(app: FastAPI, host: str = "127.0.0.1", *, log_config: dict | None = None) -> Iterator[str]:
    """Run `app` with uvicorn on a free port of `host` in a thread; yield its base URL; stop it after.

    For tests and benchmarks (loopback only). The server is the one :func:`serve`
    runs (:func:`uvicorn_config`), with the app's limits.
    """
    if not is_loopback(host):
        raise ConfigError(f"running() serves loopback only, not {host!r}")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(app, logging_config=log_config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    try:
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the metis service did not start within 15 s")
            time.sleep(0.02)
        yield f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()
