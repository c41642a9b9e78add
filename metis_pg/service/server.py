"""Running the app with uvicorn: :func:`serve` (``metis serve``) and :func:`running` (tests, benchmarks)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from fastapi import FastAPI

from ..api import Metis, connect
from ..errors import ConfigError
from .app import create_app
from .settings import check_bind, is_loopback, parse_tokens

__all__ = ["serve", "running"]

log = logging.getLogger(__name__)


def serve(
    metis: Metis | None = None,
    *,
    dsn: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8080,
    tokens: str | Sequence[str] | None = None,
    source_roots: str | Sequence[str | os.PathLike] | None = None,
    log_level: str = "info",
) -> None:
    """Run the service with uvicorn until interrupted (``metis serve``).

    The bind is checked before the database is opened: without a token only a
    loopback `host` is allowed.

    Raises:
        ConfigError: `host` is not loopback and no token is configured; a bad setting.
    """
    import uvicorn

    token_list = parse_tokens(os.environ.get("METIS_API_TOKENS") if tokens is None else tokens)
    check_bind(host, token_list)
    if metis is None:
        metis = connect(dsn)
    app = create_app(metis, tokens=token_list, source_roots=source_roots)
    log.info("metis serve on %s:%d; tokens %s; source roots %s", host, port,
             "required" if token_list else "off (loopback only)",
             ":".join(str(r) for r in app.state.source_roots) or "none (indexing off)")
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level, server_header=False, proxy_headers=False)
    finally:
        metis.close()


@contextmanager
def running(app: FastAPI, host: str = "127.0.0.1", *, log_config: dict | None = None) -> Iterator[str]:
    """Run `app` with uvicorn on a free port of `host` in a thread; yield its base URL; stop it after.

    For tests and benchmarks (loopback only).
    """
    if not is_loopback(host):
        raise ConfigError(f"running() serves loopback only, not {host!r}")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, log_config=log_config, lifespan="on", server_header=False))
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
