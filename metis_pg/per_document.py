"""Results per document (issue 25): each document once, at its best passage, with how many of its
passages matched.

A search per document asks the bases for :func:`pool_size` passages (five times `top_k`, at most
:data:`~metis_pg.search.MAX_TOP_K`), then keeps each document (base, source, path) at its first,
best-ranked passage, counting the others among those passages (``SearchResult.passages``), and
returns the first `top_k` documents. A document whose passages all rank below the pool is not
counted: the count is "among the best passages", not every passage of the document that holds a
word of the question.
"""

from __future__ import annotations

import dataclasses

from .results import SearchResponse

__all__ = ["POOL_FACTOR", "pool_size", "by_document"]

#: Passages asked per document wanted.
POOL_FACTOR = 5


def pool_size(top_k: int, limit: int = 100) -> int:
    """Return how many passages a search of `top_k` documents asks for: ``min(limit, 5 * top_k)``."""
    return max(top_k, min(limit, POOL_FACTOR * top_k))


def by_document(answer: SearchResponse, top_k: int) -> SearchResponse:
    """Return `answer` with each document once, at its best passage, the first `top_k` documents.

    Each kept result's ``passages`` is how many results of `answer` its document had. Ranks and
    scores are the passages' own (the order of `answer` is kept).
    """
    counts: dict[tuple[str, str, str], int] = {}
    first: dict[tuple[str, str, str], int] = {}
    for i, r in enumerate(answer.results):
        key = (r.base, r.citation.source, r.citation.document)
        counts[key] = counts.get(key, 0) + 1
        first.setdefault(key, i)
    kept = sorted(first.items(), key=lambda item: item[1])[:top_k]
    results = tuple(dataclasses.replace(answer.results[i], passages=counts[key]) for key, i in kept)
    return dataclasses.replace(answer, results=results, per_document=True)
