"""The search methods of :class:`metis_pg.Metis`: search, compare, evaluate.

Internal: a part of :class:`~metis_pg.api.Metis` (its base class), documented there; the work
is :mod:`metis_pg.search`'s (one pipeline for the three).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from . import access, db
from .filters import Filters
from .config import BaseSpec
from .errors import BaseNotFound, EmbeddingModelUnavailable, InvalidInput
from .results import SearchResponse
from .search import MAX_TOP_K, SearchPipeline, SearchRequest
from .search_answer import to_response

if TYPE_CHECKING:  # pragma: no cover
    from . import indexing
    from .models.embed import Embedder
    from .compare import CompareResult
    from .evaluation import EvalReport, EvalSet

__all__ = ["SearchMethods"]


class SearchMethods:
    """:meth:`search`, :meth:`compare` and :meth:`evaluate` of a :class:`~metis_pg.Metis`."""

    # -- search ------------------------------------------------------------

    def search(
        self,
        bases: str | Sequence[str],
        question: str,
        *,
        mode: str = "hybrid",
        top_k: int = 10,
        rerank: bool | None = None,
        filters: dict[str, Any] | Filters | None = None,
        fusion: dict[str, Any] | None = None,
        consistent: bool = False,
        per_document: bool = False,
        principals: access.Principals = None,
    ) -> SearchResponse:
        """Return the `top_k` passages of `bases` that best answer `question`, each cited.

        Dense: exact cosine scan (pgvector ``<=>``) of the question's embedding (with
        the model's query prefix). Keyword: BM25, k1=1.2, b=0.75 (Robertson & Zaragoza
        2009). Fusion: weighted RRF, ``dense_weight / (rrf_k + dense_rank) + keyword_weight /
        (rrf_k + keyword_rank)``, ranks from 1 (Cormack, Clarke & Buettcher, SIGIR 2009),
        the base's spec (defaults: :class:`~metis_pg.config.BaseSpec`) or `fusion`. Each leg keeps max(50, 4*top_k); all three in one SQL
        statement with the filters inside both legs. With a reranker (and `rerank`
        not False) the best min(50, max(20, 3*top_k)) fused passages are reordered.

        Args:
            bases: a base name or several (SPEC F12); each result names its base.
            question: 1 to 2,000 characters.
            mode: ``hybrid``, ``dense`` or ``keyword`` (needs no embedding model).
            top_k: 1 to 100 results.
            rerank: False skips the reranker; None/True use it when the base has one.
            filters: ``{"path_prefix": str, "kinds": [...], "sources": [...]}``.
            fusion: ``{"rrf_k": int, "dense_weight": float, "keyword_weight": float}`` (any of
                them) overriding the bases' spec for this search; echoed in ``answer.fusion``.
            consistent: with read replicas, search one that has replayed every write committed
                on the primary so far (waiting up to ``replica_consistent_wait_s``), else the
                primary: read-your-writes after indexing. Without replicas it changes nothing.
            per_document: each document once, at its best passage, with ``passages`` = how many of
                its passages are among the best ``min(100, 5 * top_k)``; `top_k` documents
                (:mod:`metis_pg.per_document`).
            principals: the groups the search is made for: only documents they may read are ranked,
                counted or cited, enforced by PostgreSQL's row-level security; None = the trusted
                operator, every document; ``[]`` = documents without readers only
                (:mod:`metis_pg.access`).

        Raises:
            InvalidInput: empty or too long question, unknown mode, top_k out of range, bad filter,
                bad fusion override (an unknown key; rrf_k not 1-10,000; a weight not finite, < 0,
                or both 0).
            BaseNotFound: a base does not exist.
            EmbeddingModelUnavailable: ``mode="dense"`` and the embedding model did not answer.
        """
        if per_document and isinstance(top_k, int) and 1 <= top_k <= MAX_TOP_K:
            from .per_document import by_document, pool_size

            answer = self._search(bases, question, mode=mode, top_k=pool_size(top_k, MAX_TOP_K), rerank=rerank,
                                  filters=filters, embedder_for=self.embedder, fusion=fusion, consistent=consistent,
                                  principals=principals)
            return by_document(answer, top_k)
        return self._search(bases, question, mode=mode, top_k=top_k, rerank=rerank, filters=filters,
                            embedder_for=self.embedder, fusion=fusion, consistent=consistent, principals=principals)

    def _search(
        self,
        bases: str | Sequence[str],
        question: str,
        *,
        mode: str,
        top_k: int,
        rerank: bool | None,
        filters: dict[str, Any] | Filters | None,
        embedder_for: Callable[[BaseSpec], Embedder],
        count: bool = True,
        fusion: dict[str, Any] | None = None,
        consistent: bool = False,
        principals: access.Principals = None,
    ) -> SearchResponse:
        """:meth:`search`, embedding the question with ``embedder_for(spec)`` (evaluate passes
        one that answers from questions embedded beforehand, and ``count=False``)."""
        request = SearchRequest.build(bases, question, mode=mode, top_k=top_k, rerank=rerank, filters=filters,
                                      fusion=fusion)

        def read(pool: db.Pool) -> SearchResponse:
            pipeline = SearchPipeline(pool, embedder_for, self.reranker, count_pool=self.pool)
            return to_response(pipeline.run(request, count=count))

        return self._read_answer(read, consistent=consistent, principals=principals)

    def pipeline(self, pool: db.Pool | None = None) -> SearchPipeline:
        """Return the search pipeline with the shared model clients, reading `pool` (default this
        database's; a read replica's) and counting searches on this database."""
        return SearchPipeline(pool or self.pool, self.embedder, self.reranker, count_pool=self.pool)

    # -- compare, evaluate (SPEC F15, F16) -----------------------------------

    def compare(self, bases: str | Sequence[str], question: str, *, top_k: int = 10,
                rerank: bool | None = None,
                filters: dict[str, Any] | Filters | None = None,
                fusion: dict[str, Any] | None = None, principals: access.Principals = None) -> "CompareResult":
        """Ask `question` in the hybrid, dense and keyword modes; return every passage found, explained.

        One statement gives each passage its rank in each mode (the same ranks as
        ``search(mode=...)`` with this `top_k`, `filters` and `fusion`) and why it came up;
        see :mod:`metis_pg.compare`. `principals`: as for :meth:`search`.

        Raises:
            InvalidInput: empty or too long question, top_k out of range, bad filter, bad fusion override.
            BaseNotFound: a base does not exist.
        """
        from .compare import compare

        return self._read_answer(lambda pool: compare(
            _ReadView(self, pool), bases, question, top_k=top_k, rerank=rerank, filters=filters, fusion=fusion),
            principals=principals)

    def evaluate(
        self,
        base: str | None,
        eval_set: "str | os.PathLike | EvalSet",
        *,
        modes: Sequence[str] | None = None,
        top_k: int = 50,
        on_progress: "Callable[[int, int], None] | None" = None,
        on_index_progress: indexing.Progress | None = None,
    ) -> "EvalReport":
        """Ask every question of an evaluation set in each mode; return nDCG@10, Recall@10/@50, MRR@10, ….

        A BEIR folder's corpus is written as Markdown under ``$METIS_HOME/eval-corpora/<folder>``
        and indexed into `base` (default: the set's name) when that base does not exist.
        Questions are embedded once beforehand, in batches; see :mod:`metis_pg.evaluation`.

        Args:
            base: the base searched; None = the set's name.
            eval_set: a BEIR folder, a JSON evaluation set (``docs/evaluation.md``) or an :class:`EvalSet`.
            modes: of ``hybrid``, ``dense``, ``keyword``, ``hybrid_no_rerank``; default the first
                three, and ``hybrid_no_rerank`` when the base has a reranker.
            top_k: passages asked per search (50 lets Recall@50 see 50 documents).

        Raises:
            InvalidInput: a malformed set, an unknown mode, or no base and no corpus to index.
        """
        from . import evaluation, sqlfiles

        if not isinstance(eval_set, evaluation.EvalSet):
            eval_set = evaluation.load(eval_set, cache_root=self.settings.home / "eval-corpora")
        name = base or eval_set.name
        indexed = False
        try:
            row = self._base_row(name)
        except BaseNotFound:
            if eval_set.corpus is None:
                raise InvalidInput(f"no base named {name!r} and the set names no corpus to index") from None
            self.index(name, eval_set.corpus, on_progress=on_index_progress)
            row = self._base_row(name)
            indexed = True  # a read replica must have replayed it before it is searched
        spec = row.base_spec
        if modes is None:
            modes = ("hybrid", "dense", "keyword") + (("hybrid_no_rerank",) if spec.reranker_model else ())
        chunk_lines: dict[str, list[tuple[int, int]]] = {}
        if eval_set.located:
            documents = sorted({j.document for q in eval_set.queries for j in q.judgments if j.line is not None})
            with self.pool.connection() as conn:
                for document, line, chunk_id in conn.execute(
                    sqlfiles.load("evaluation/chunk_lines"), {"base_id": row.base_id, "documents": documents}
                ):
                    chunk_lines.setdefault(document, []).append((line, chunk_id))
        cached = evaluation.CachedQueries(self.embedder(spec))
        if any(m != "keyword" for m in modes):
            try:
                cached.prefill([q.question for q in eval_set.queries])
            except EmbeddingModelUnavailable:
                pass  # each search then degrades (or fails in mode dense) on its own

        def embedder_for(other: BaseSpec) -> Embedder:
            return cached if other == spec else self.embedder(other)

        return evaluation.run(
            lambda q, mode, k, rr: self._search(name, q, mode=mode, top_k=k, rerank=rr, filters=None,
                                                embedder_for=embedder_for, count=False, consistent=indexed),
            eval_set, base=name, modes=modes, top_k=top_k, chunk_lines=chunk_lines, on_progress=on_progress,
        )


class _ReadView:
    """What :func:`metis_pg.compare.compare` reads of a :class:`Metis` (its pool, its pipeline),
    on a read replica's pool; searches are still counted on the primary."""

    def __init__(self, metis: SearchMethods, pool: db.Pool) -> None:
        self._metis, self.pool = metis, pool

    def pipeline(self) -> SearchPipeline:
        return self._metis.pipeline(self.pool)
