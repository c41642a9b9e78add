"""Remote embedding services over HTTP, with retries while indexing and a batch size that adapts.

Protocols (chosen by ``BaseSpec.embedding_protocol``):

Remote protocols (chosen by ``BaseSpec.embedding_protocol``):

- ``"openai"``: ``POST {url}/v1/embeddings`` ``{"model", "input": [...],
  "encoding_format"}`` → ``{"data": [{"index", "embedding"}]}``; the embedding
  is a list of floats or, with ``encoding_format="base64"``, base64 of
  little-endian float32. OpenAI, vLLM, Infinity, TEI's OpenAI route, Ollama,
  ``metis eos serve``.
- ``"tei"``: HuggingFace text-embeddings-inference ``POST {url}/embed``
  ``{"inputs": [...], "truncate": true}`` → ``[[...], ...]``.
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
from typing import Any, Sequence

import httpx
import numpy as np
import tenacity

from ..config import BaseSpec, Settings
from ..errors import ConfigError, EmbeddingModelUnavailable
from ._http import HttpModelClient, api_key_headers, endpoint_url, fail, is_transient, post_json, timed_out
from ._protocol import PASSAGES_DONE, as_text_list, normalised_rows

__all__ = ["RemoteEmbedder"]


#: Share of ``model_timeout_s`` one embedding request is sized to take (the rest absorbs slowdowns).
REQUEST_TIME_SHARE = 0.5
#: Longest wait between two retries of an indexing request, in seconds.
RETRY_MAX_WAIT_S = 8.0


class _BatchSizer:
    """How many texts the next embedding request carries, so that it takes about half the timeout.

    Starts at one text (nothing is known of the server), then follows the
    seconds per text measured on answered requests: the size fitting
    :data:`REQUEST_TIME_SHARE` of the timeout, at most twice the size last
    measured (slow start) and at most ``max_size``. A request of ``n`` texts
    that timed out means at least ``timeout_s / n`` s per text: the next size is
    at most ``n // 2``. Thread-safe.
    """

    def __init__(self, max_size: int, timeout_s: float) -> None:
        self.max_size, self.timeout_s = max_size, timeout_s
        self._lock = threading.Lock()
        self._size = 1
        self._per_text_s: float | None = None

    def size(self) -> int:
        """Texts for the next request (1 to ``max_size``)."""
        with self._lock:
            return self._size

    def answered(self, n: int, seconds: float) -> None:
        """A request of ``n`` texts was answered in ``seconds``."""
        with self._lock:
            per = max(seconds, 1e-6) / n
            old = self._per_text_s
            # Quick to slow down, slow to speed up.
            self._per_text_s = per if old is None or per > old else (old + per) / 2
            fit = int(REQUEST_TIME_SHARE * self.timeout_s / self._per_text_s)
            self._size = max(1, min(self.max_size, fit, 2 * max(n, self._size)))

    def timed_out(self, n: int) -> None:
        """A request of ``n`` texts got no answer within the timeout."""
        with self._lock:
            self._per_text_s = max(self._per_text_s or 0.0, self.timeout_s / n)
            self._size = max(1, min(self._size, n // 2))


class RemoteEmbedder(HttpModelClient):
    """An embedding service reached over HTTP (OpenAI-style or TEI), per the base's spec.

    The spec's ``query_prefix`` / ``passage_prefix`` are put before each text
    sent. Each request may take ``model_timeout_s``; the answer is checked
    (count, indexes, dimension, finite values) and L2-normalised. The API key,
    if any, is read from ``$embedding_api_key_env`` at each request.

    Requests are sized to the timeout: the first carries one text, the next
    ones as many as fit half of ``model_timeout_s`` at the seconds per text
    measured so far (at most ``embedding_batch_size``, at most twice the last
    size). A request of several texts that times out is sent again in halves;
    a single text that times out is a failure. So a slow server (the bundled
    model over ``metis eos serve`` on 2 cores: ~0.8 s per passage) is never
    sent more than it can answer in time.

    ``embed_passages`` (indexing) retries a request that failed in a way that
    may pass (no answer in time, connection refused or dropped, HTTP 5xx, 408,
    429) up to ``settings.model_retry_attempts`` attempts in all, waiting
    ``model_retry_wait_s`` x 2^k s plus jitter (tenacity); never after HTTP 4xx
    or a malformed answer, nor once the client's circuit breaker is open.
    ``embed_queries`` (a search's question) is never retried: a search does not
    wait for backoffs.

    Every request goes through ``self.breaker``: after
    ``settings.model_breaker_failures`` failures in a row the model is skipped
    for ``settings.model_breaker_cooldown_s`` s (calls fail at once, saying so).

    Args:
        spec: the base's spec (``embedding_url`` must be set).
        encoding_format: ``"float"`` (default; every server) or ``"base64"``
            (smaller answers; OpenAI, vLLM, Infinity, ``metis eos serve``).
            Only for the ``"openai"`` protocol.
        transport: an httpx transport (tests use ``httpx.MockTransport``).
        settings: process settings (breaker, retries).

    Raises (from the embed methods):
        EmbeddingModelUnavailable: no answer within ``model_timeout_s``,
            connection refused, HTTP >= 400, not JSON, wrong count or shape,
            NaN/inf values, or the model skipped by the breaker. Nothing is
            returned for the other batches.
        EmbeddingDimensionMismatch: vectors of another dimension than the spec's.
    """

    error = EmbeddingModelUnavailable

    def __init__(
        self,
        spec: BaseSpec,
        *,
        encoding_format: str = "float",
        transport: httpx.BaseTransport | None = None,
        settings: Settings,
    ) -> None:
        if not spec.embedding_url:
            raise ConfigError("a remote embedder needs embedding_url")
        if encoding_format not in ("float", "base64"):
            raise ConfigError(f"encoding_format must be 'float' or 'base64', not {encoding_format!r}")
        self.spec = spec
        self.name = spec.embedding_model
        self.dim = spec.embedding_dim
        self.protocol = spec.embedding_protocol
        self.encoding_format = encoding_format
        path = "/v1/embeddings" if self.protocol == "openai" else "/embed"
        self.url = endpoint_url(spec.embedding_url, path)
        self.label = f"embedding model {self.name!r} at {self.url}"
        super().__init__(transport, settings=settings)
        self.sizer = _BatchSizer(spec.embedding_batch_size, spec.model_timeout_s)

    # -- embedding ---------------------------------------------------------
    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``(n, dim)`` float32 L2-normalised vectors of questions (``query_prefix`` + text); no retry."""
        return self._embed([self.spec.query_prefix + t for t in as_text_list(texts)], retry=False)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``(n, dim)`` float32 L2-normalised vectors of chunks (``passage_prefix`` + text); retried."""
        return self._embed([self.spec.passage_prefix + t for t in as_text_list(texts)], retry=True)

    def _embed(self, items: list[str], *, retry: bool) -> np.ndarray:
        if not items:
            return np.empty((0, self.dim), dtype=np.float32)
        notify = PASSAGES_DONE.get() if retry else None  # passages (retried), not questions
        out: list[np.ndarray] = []
        start = 0
        while start < len(items):
            n = min(self.sizer.size(), len(items) - start)
            try:
                out.append(self._request(items[start : start + n], retry=retry))
            except EmbeddingModelUnavailable as exc:
                if n > 1 and timed_out(exc):
                    self.sizer.timed_out(n)  # the same texts again, in halves
                    continue
                raise
            start += n
            if notify is not None:
                notify(n)
        return np.concatenate(out, axis=0)

    def _request(self, batch: list[str], *, retry: bool) -> np.ndarray:
        def attempt() -> np.ndarray:
            return self.breaker.call(lambda: self._embed_batch(batch))

        if not retry or self.settings.model_retry_attempts <= 1:
            return attempt()

        def worth_retrying(exc: BaseException) -> bool:
            if len(batch) > 1 and timed_out(exc):
                return False  # sent again in halves by _embed, not as it is
            return is_transient(exc) and self.breaker.state == "closed"

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.settings.model_retry_attempts),
            wait=tenacity.wait_exponential_jitter(
                multiplier=self.settings.model_retry_wait_s, max=RETRY_MAX_WAIT_S, jitter=self.settings.model_retry_wait_s
            ),
            retry=tenacity.retry_if_exception(worth_retrying),
            reraise=True,
        )
        return retrying(attempt)

    def _embed_batch(self, batch: list[str]) -> np.ndarray:
        if self.protocol == "openai":
            payload: dict[str, Any] = {"model": self.name, "input": batch, "encoding_format": self.encoding_format}
        else:
            payload = {"inputs": batch, "truncate": True}
        started = time.monotonic()
        answer = post_json(
            self._http(),
            self.url,
            payload,
            error=EmbeddingModelUnavailable,
            label=self.label,
            timeout_s=self.spec.model_timeout_s,
            headers=api_key_headers(self.spec.embedding_api_key_env),
        )
        self.sizer.answered(len(batch), time.monotonic() - started)
        if self.protocol == "openai":
            rows = self._parse_openai(answer, len(batch))
        else:
            rows = self._parse_tei(answer, len(batch))
        return normalised_rows(rows, dim=self.dim, label=self.label)

    def _vector(self, value: Any, position: int) -> np.ndarray:
        if isinstance(value, str):
            try:
                raw = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                fail(EmbeddingModelUnavailable, self.label, f"answered an embedding that is neither a list nor base64 (input {position})")
            if len(raw) % 4:
                fail(EmbeddingModelUnavailable, self.label, f"answered base64 that is not float32 values (input {position})")
            return np.frombuffer(raw, dtype="<f4").astype(np.float64)
        if isinstance(value, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
            return np.asarray(value, dtype=np.float64)
        fail(EmbeddingModelUnavailable, self.label, f"answered an embedding that is not a list of numbers (input {position})")

    def _parse_openai(self, answer: Any, n: int) -> list[np.ndarray]:
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            fail(EmbeddingModelUnavailable, self.label, "answered JSON without a 'data' list")
        if len(data) != n:
            fail(EmbeddingModelUnavailable, self.label, f"answered {len(data)} vectors for {n} inputs")
        if not all(isinstance(item, dict) for item in data):
            fail(EmbeddingModelUnavailable, self.label, "answered 'data' items that are not objects")
        with_index = [("index" in item) for item in data]
        if any(with_index) and not all(with_index):
            fail(EmbeddingModelUnavailable, self.label, "answered some 'data' items without an 'index'")
        rows: list[np.ndarray | None] = [None] * n
        for position, item in enumerate(data):
            index = item["index"] if all(with_index) else position
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n:
                fail(EmbeddingModelUnavailable, self.label, f"answered index {index!r}, outside 0..{n - 1}")
            if rows[index] is not None:
                fail(EmbeddingModelUnavailable, self.label, f"answered index {index} twice")
            if "embedding" not in item:
                fail(EmbeddingModelUnavailable, self.label, f"answered no 'embedding' for input {index}")
            rows[index] = self._vector(item["embedding"], index)
        return rows  # type: ignore[return-value]  # all filled: n distinct indexes in range

    def _parse_tei(self, answer: Any, n: int) -> list[np.ndarray]:
        if not isinstance(answer, list):
            fail(EmbeddingModelUnavailable, self.label, "answered JSON that is not a list of vectors")
        if len(answer) != n:
            fail(EmbeddingModelUnavailable, self.label, f"answered {len(answer)} vectors for {n} inputs")
        return [self._vector(value, i) for i, value in enumerate(answer)]

