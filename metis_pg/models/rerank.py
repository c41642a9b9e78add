"""Rerankers: a remote service scores (question, chunk) pairs (SPEC F8, F14).

Protocols (chosen by ``BaseSpec.reranker_protocol``):

- ``"cohere"`` (Cohere, Jina, vLLM, ``metis eos serve``): ``POST {url}/v1/rerank``
  ``{"model", "query", "documents", "top_n"}`` →
  ``{"results": [{"index", "relevance_score"}]}``.
- ``"tei"`` (HuggingFace text-embeddings-inference): ``POST {url}/rerank``
  ``{"query", "texts", "truncate": true}`` → ``[{"index", "score"}]``; texts go
  in batches of 32 (TEI's default ``--max-client-batch-size``).
- ``"infinity"`` (michaelfeil/infinity): ``POST {url}/rerank``
  ``{"model", "query", "documents", "return_documents": false}`` →
  ``{"object": "rerank", "results": [{"index", "relevance_score"}], ...}``
  (some older releases named the list ``"data"``: both are read).

Scores come back in *input* order; higher is better. Every document must be
scored exactly once, with a finite number, or the whole call fails.
"""

from __future__ import annotations

import math
import time
from typing import Any, Protocol, Sequence, runtime_checkable

import httpx
import numpy as np

from ..config import BaseSpec, Settings
from ..errors import ConfigError, RerankerUnavailable
from ._http import HttpModelClient, api_key_headers, endpoint_url, fail, post_json

__all__ = ["Reranker", "RemoteReranker", "make_reranker"]

#: Texts per request for TEI, whose ``--max-client-batch-size`` defaults to 32.
TEI_RERANK_BATCH = 32


@runtime_checkable
class Reranker(Protocol):
    """Scores candidate chunks against a question (SPEC F8)."""

    name: str

    def rerank(self, query: str, documents: Sequence[str]) -> np.ndarray:
        """Return ``(len(documents),)`` float64 scores in input order; higher is better."""
        ...


class RemoteReranker(HttpModelClient):
    """A reranker service reached over HTTP (Cohere-style, TEI or Infinity), per the base's spec.

    One :meth:`rerank` call takes at most ``model_timeout_s`` in all, even when
    split in batches (TEI), so a search never waits longer for its reranker.
    Never retried (a search does not wait for backoffs). Every request goes
    through ``self.breaker``: after ``settings.model_breaker_failures``
    failures in a row the reranker is skipped for
    ``settings.model_breaker_cooldown_s`` s, failing at once with a message
    that says so (the search's FUSED_ORDER warning carries it).

    Args:
        spec: the base's spec (``reranker_model`` and ``reranker_url`` set).
        batch_size: documents per request; default 32 for TEI, all at once otherwise.
        transport: an httpx transport (tests use ``httpx.MockTransport``).
        settings: process settings (the breaker's).

    Raises (from :meth:`rerank`):
        RerankerUnavailable: no answer in time, connection refused, HTTP >= 400,
            not JSON, a document scored twice or not at all, an index out of
            range, a score that is not a finite number, or the reranker skipped
            by the breaker.
    """

    error = RerankerUnavailable

    def __init__(
        self,
        spec: BaseSpec,
        *,
        batch_size: int | None = None,
        transport: httpx.BaseTransport | None = None,
        settings: Settings,
    ) -> None:
        if not spec.reranker_model or not spec.reranker_url:
            raise ConfigError("a remote reranker needs reranker_model and reranker_url")
        if batch_size is not None and batch_size < 1:
            raise ConfigError("batch_size must be at least 1")
        self.spec = spec
        self.name = spec.reranker_model
        self.protocol = spec.reranker_protocol
        self.batch_size = batch_size or (TEI_RERANK_BATCH if self.protocol == "tei" else None)
        path = "/v1/rerank" if self.protocol == "cohere" else "/rerank"
        self.url = endpoint_url(spec.reranker_url, path)
        self.label = f"reranker {self.name!r} at {self.url}"
        super().__init__(transport, settings=settings)

    def rerank(self, query: str, documents: Sequence[str]) -> np.ndarray:
        """Return ``(len(documents),)`` float64 scores in input order; higher is better.

        Raises:
            RerankerUnavailable: see the class docstring; never partial scores.
        """
        if isinstance(documents, str):
            raise TypeError("pass a sequence of documents, not a single str")
        docs = list(documents)
        if not docs:
            return np.empty(0, dtype=np.float64)
        timeout_s = self.spec.model_timeout_s
        deadline = time.monotonic() + timeout_s
        size = self.batch_size or len(docs)
        scores = np.empty(len(docs), dtype=np.float64)
        for start in range(0, len(docs), size):
            batch = docs[start : start + size]
            scores[start : start + len(batch)] = self.breaker.call(
                lambda batch=batch, start=start: self._scored(query, batch, start, timeout_s=timeout_s, deadline=deadline)
            )
        return scores

    def _scored(self, query: str, batch: list[str], offset: int, *, timeout_s: float, deadline: float) -> np.ndarray:
        answer = post_json(
            self._http(),
            self.url,
            self._payload(query, batch),
            error=RerankerUnavailable,
            label=self.label,
            timeout_s=timeout_s,
            deadline=deadline,
            headers=api_key_headers(self.spec.reranker_api_key_env),
        )
        return self._parse(answer, len(batch), offset=offset)

    def _payload(self, query: str, batch: list[str]) -> dict[str, Any]:
        if self.protocol == "cohere":
            return {"model": self.name, "query": query, "documents": batch, "top_n": len(batch)}
        if self.protocol == "tei":
            return {"query": query, "texts": batch, "truncate": True}
        return {"model": self.name, "query": query, "documents": batch, "return_documents": False}

    def _parse(self, answer: Any, n: int, *, offset: int) -> np.ndarray:
        if self.protocol == "tei":
            items, score_key = answer, "score"
            if not isinstance(items, list):
                fail(RerankerUnavailable, self.label, "answered JSON that is not a list of scores")
        else:
            score_key = "relevance_score"
            items = None
            if isinstance(answer, dict):
                items = answer.get("results")
                if items is None and self.protocol == "infinity":
                    items = answer.get("data")
            if not isinstance(items, list):
                fail(RerankerUnavailable, self.label, "answered JSON without a 'results' list")
        scores: list[float | None] = [None] * n
        for item in items:
            if not isinstance(item, dict):
                fail(RerankerUnavailable, self.label, "answered results that are not objects")
            index, score = item.get("index"), item.get(score_key)
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n:
                fail(RerankerUnavailable, self.label, f"answered index {index!r}, outside 0..{n - 1}")
            if scores[index] is not None:
                fail(RerankerUnavailable, self.label, f"scored document {index + offset} twice")
            if not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score):
                fail(RerankerUnavailable, self.label, f"answered {score_key} {score!r} for document {index + offset}, not a finite number")
            scores[index] = float(score)
        missing = [i + offset for i, s in enumerate(scores) if s is None]
        if missing:
            shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
            fail(RerankerUnavailable, self.label, f"gave no score for document(s) {shown}")
        return np.asarray(scores, dtype=np.float64)


def make_reranker(spec: BaseSpec, *, settings: Settings,
                  transport: httpx.BaseTransport | None = None) -> Reranker | None:
    """Return the base's reranker, or None when its spec has none (SPEC F8: fused order).

    `settings` gives the breaker's thresholds."""
    if not spec.reranker_model:
        return None
    return RemoteReranker(spec, transport=transport, settings=settings)
