"""The search pipeline: embed → statement → rerank → memory order → results (SPEC F5-F14).

One pipeline serves :meth:`Metis.search <metis_pg.api.Metis.search>`,
:func:`~metis_pg.compare.compare` and :meth:`Metis.evaluate
<metis_pg.api.Metis.evaluate>`, so the three never drift apart:

1. **Embed** the question once per embedding model (``embedder_for(spec)``). A model
   that does not answer turns a hybrid search into a keyword one (warning
   ``KEYWORD_ONLY``) and refuses a dense one (:class:`EmbeddingModelUnavailable`).
2. **Statement**: bases sharing an embedding model (served the same way) *and*
   BM25/RRF parameters are searched as by one ``sql/search/hybrid.sql`` statement (both legs and their
   fusion, filters inside both legs): one base by that statement; several by one statement per base,
   run at once on connections of their own and fused as the one statement over them would
   (:func:`~metis_pg.retrieval.fuse_bases`; a router query each on Citus, the cores side by side on
   one node: docs/scaling.md). Each group uses its own bases' k1, b, rrf_k, dense_weight and
   keyword_weight (weighted RRF: ``dense_weight / (rrf_k + dense_rank) + keyword_weight /
   (rrf_k + keyword_rank)``), or the request's ``fusion`` override of rrf_k and the weights.
   Groups (bases of different models or parameters) are merged by RRF over their
   fused ranks, each list with its own rrf_k (Cormack, Clarke & Buettcher, SIGIR 2009).
3. **Rerank** the best ``rerank_candidates(top_k)`` fused passages when the bases
   have a reranker (SPEC F8); past those the fused order is kept. Bases naming
   different rerankers are not reranked (their scores are not comparable): the
   answer keeps the fused order and says so (``FUSED_ORDER``).
4. **Memory order** (SPEC F11): facts that still hold before replaced ones, each
   group in its ranked order.
5. **Warnings** about what is indexed (``NOTHING_INDEXED``, ``NO_READABLE_DOCUMENT``,
   ``NO_VECTOR_YET``), about the filters (``UNKNOWN_SOURCE``, ``FILTERS_MATCH_NOTHING``), and about a base whose
   postings an older tokenizer made (``TOKENIZER_CHANGED``).

A search adds one to each base's count for the day (SPEC F20) unless asked not to
(evaluation runs are not searches anyone made).
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from psycopg_pool import ConnectionPool

from . import fusion as fusion_functions, query_syntax, retrieval, sqlfiles, storage
from .config import FUSION_FIELDS, BaseSpec, fusion_problem
from .filters import Filters
from .errors import EmbeddingModelUnavailable, InvalidInput, RerankerUnavailable
from .memories import order_facts
from .search_answer import fusion_echo
from .search_counts import counts_of
from .search_warnings import health_warnings, tokenizer_warnings, unknown_source_warnings
from .results import SearchWarning, Took
from .tokenizer import query_terms

if TYPE_CHECKING:  # pragma: no cover
    from .models.embed import Embedder  # numpy: imported by a search that embeds
    from .models.rerank import Reranker  # imported by make_reranker when a base has one: httpx

__all__ = [
    "MODES", "MAX_TOP_K", "MAX_QUESTION_CHARS", "SearchRequest", "Ranked", "SearchPipeline",
    "check_request", "check_fusion", "rerank_candidates", "statement_key", "merge_by_rank",
]

MODES = ("hybrid", "dense", "keyword")
#: Results a search may ask for at most.
MAX_TOP_K = 100
#: Characters a question may hold at most.
MAX_QUESTION_CHARS = 2000


def check_request(names: Sequence[str], question: str, top_k: int, mode: str = "hybrid") -> None:
    """Check what a search or a compare is asked, in the order a caller reads the errors.

    Raises:
        InvalidInput: no base, an unknown mode, top_k not an integer from 1 to MAX_TOP_K,
            an empty question or one over MAX_QUESTION_CHARS characters.
    """
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


def check_fusion(fusion: dict[str, Any] | None) -> dict[str, Any]:
    """Check a search's override of its bases' fusion parameters; return it (a new dict, {} for None).

    `fusion` holds any of ``fusion`` (``rrf`` or ``convex``), ``normalization`` (``tmm``,
    ``minmax`` or ``z``), ``alpha`` (0 to 1), ``routing`` (true/false), ``rrf_k`` (1 to 10,000),
    ``dense_weight`` and ``keyword_weight`` (finite, >= 0, not both 0), as
    :class:`~metis_pg.config.BaseSpec` checks them.

    Raises:
        InvalidInput: not a dict, an unknown key, or a value out of range.
    """
    if fusion is None:
        return {}
    if not isinstance(fusion, dict):
        raise InvalidInput(f"fusion must be an object with any of {', '.join(FUSION_FIELDS)}")
    unknown = [k for k in fusion if k not in FUSION_FIELDS]
    if unknown:
        raise InvalidInput(f"fusion has no field {unknown[0]!r} (fields: {', '.join(FUSION_FIELDS)})")
    given = {k: v for k, v in fusion.items() if v is not None}
    # Both weights 0 is refused here when both are given, else per base (SearchRequest.spec_for).
    problem = fusion_problem(**given)
    if problem:
        raise InvalidInput(f"fusion: {problem}")
    return {k: float(v) if k in ("dense_weight", "keyword_weight", "alpha") else v for k, v in given.items()}


def rerank_candidates(top_k: int) -> int:
    """Fused candidates a reranker reads: 3 x top_k, at least 20, at most 50 (SPEC F8)."""
    return min(50, max(20, 3 * top_k))


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """One question, checked: which bases, how, how many, with which filters.

    Build it with :meth:`build`, which validates every field.
    """

    bases: tuple[str, ...]
    question: str
    mode: str = "hybrid"
    top_k: int = 10
    rerank: bool | None = None
    filters: Filters = field(default_factory=Filters)
    fusion: dict[str, Any] = field(default_factory=dict)
    parsed: query_syntax.ParsedQuestion | None = None

    @property
    def searched(self) -> str:
        """What is embedded and tokenized: the question without its ``-word`` exclusions."""
        return self.parsed.text if self.parsed is not None else self.question

    @classmethod
    def build(
        cls,
        bases: str | Sequence[str],
        question: str,
        *,
        mode: str = "hybrid",
        top_k: int = 10,
        rerank: bool | None = None,
        filters: dict[str, Any] | Filters | None = None,
        fusion: dict[str, Any] | None = None,
    ) -> "SearchRequest":
        """Return a checked request; duplicate base names are asked once.

        Args:
            fusion: overrides the bases' ``rrf_k``, ``dense_weight``, ``keyword_weight``
                (any of them) for this search; see :func:`check_fusion`.

        Raises:
            InvalidInput: as :func:`check_request`, a bad filter, a bad fusion override, or a
                question of ``-word`` exclusions only (:func:`metis_pg.query_syntax.parse`).
        """
        names = (bases,) if isinstance(bases, str) else tuple(dict.fromkeys(bases))
        check_request(names, question, top_k, mode)
        if not isinstance(filters, Filters):
            filters = Filters.from_mapping(filters)
        return cls(bases=names, question=question, mode=mode, top_k=top_k, rerank=rerank, filters=filters,
                   fusion=check_fusion(fusion), parsed=query_syntax.parse(question))

    def spec_for(self, spec: BaseSpec) -> BaseSpec:
        """Return a base's spec with this request's fusion override applied.

        Raises:
            InvalidInput: the override and the spec together set both weights to 0.
        """
        if not self.fusion:
            return spec
        merged = {name: self.fusion.get(name, getattr(spec, name)) for name in FUSION_FIELDS}
        problem = fusion_problem(**merged)
        if problem:
            raise InvalidInput(f"fusion: {problem}")
        return dataclasses.replace(spec, **merged)


@dataclass(slots=True)
class Ranked:
    """What the pipeline found for one request.

    Attributes:
        candidates: the answer's order: reranked head, then the fused tail, facts
            that hold before replaced ones within the first ``top_k``. Holds every
            candidate the statements returned (more than ``top_k`` for compare).
        rerank_scores: chunk id → reranker score, for the reranked head.
        reranked: whether the reranker's order is the answer's.
        warnings: what the search could not do, or what the caller should know.
        took: milliseconds per step.
        fusion: the fusion parameters used, as :func:`~metis_pg.search_answer.fusion_echo` gives them.
        weighing: base name -> the question's terms that weigh there, which snippets mark
            (:func:`metis_pg.snippets.weighing_terms`).
    """

    request: SearchRequest
    candidates: list[retrieval.Candidate]
    rerank_scores: dict[int, float]
    reranked: bool
    warnings: list[SearchWarning]
    took: Took
    fusion: dict[str, Any] = field(default_factory=dict)
    weighing: dict[str, frozenset[str]] = field(default_factory=dict)


#: Returns the (shared) embedding client of a base spec.
EmbedderFor = Callable[[BaseSpec], "Embedder"]
#: Returns the (shared) reranker client of a base spec, None when it has none.
RerankerFor = Callable[[BaseSpec], "Reranker | None"]


class SearchPipeline:
    """Runs :class:`SearchRequest` s against a pool with the given model clients.

    Thread-safe when the pool and the model clients are.
    """

    def __init__(self, pool: ConnectionPool, embedder_for: EmbedderFor, reranker_for: RerankerFor, *,
                 count_pool: ConnectionPool | None = None) -> None:
        self.pool = pool
        self.count_pool = count_pool or pool  # a read replica searches; the primary counts (SPEC F20)
        self.embedder_for = embedder_for
        self.reranker_for = reranker_for

    def run(self, request: SearchRequest, *, every_candidate: bool = False, count: bool = True) -> Ranked:
        """Search; return the ranked candidates, the warnings and the time of each step.

        Args:
            every_candidate: return every passage either leg kept (``2 x leg_limit(top_k)``
                rows per statement), not only what the answer needs: compare shows them.
            count: add one to each base's search count of the day (SPEC F20).

        Raises:
            BaseNotFound: a base does not exist.
            EmbeddingModelUnavailable: ``mode="dense"`` and the embedding model did not answer.
        """
        started = time.perf_counter()
        top_k, mode = request.top_k, request.mode
        with self.pool.connection() as conn:
            rows = [storage.get_base(conn, n) for n in request.bases]
            health = {r["name"]: r for r in storage.list_bases_light(conn, [r.base_id for r in rows])}
        specs = {r.base_id: request.spec_for(r.base_spec) for r in rows}
        warnings: list[SearchWarning] = []
        if not any(ch.isalnum() for ch in request.question):
            # No letter or digit (only punctuation, symbols): nothing to match; by meaning alone the
            # answer would be top_k arbitrary passages. Say so instead (issue 15).
            warnings.append(SearchWarning("NO_WORDS", f"the question {request.question.strip()!r} holds no word, only "
                                                      "punctuation or symbols: nothing was searched"))
            return Ranked(request=request, candidates=[], rerank_scores={}, reranked=False, warnings=warnings,
                          fusion=fusion_echo({r.name: specs[r.base_id] for r in rows}, {}, mode),
                          took=Took(total=(time.perf_counter() - started) * 1000))
        reranker_spec = self._reranker_spec(rows, specs, request, warnings)
        if every_candidate:
            fetch = 2 * retrieval.leg_limit(top_k)
        elif reranker_spec is not None:
            # The reranker reads at most 50 (F8); past those, a top_k over 50 keeps the fused order.
            fetch = max(top_k, rerank_candidates(top_k))
        else:
            fetch = top_k
        terms = query_terms(request.searched) if mode != "dense" else []
        parsed = request.parsed or query_syntax.parse(request.question)

        # One statement per group of bases sharing a model and the BM25 / fusion parameters.
        groups: dict[tuple, list[storage.BaseRow]] = {}
        for r in rows:
            groups.setdefault(statement_key(specs[r.base_id]), []).append(r)
        vectors: dict[tuple, Any] = {}  # the question's vector per embedding service
        took = {"embed": 0.0, "dense": 0.0, "keyword": 0.0, "fuse": 0.0}
        lists: list[tuple[int, list[retrieval.Candidate]]] = []
        plans: dict[str, tuple[fusion_functions.Plan, retrieval.Candidate | None]] = {}
        for group in groups.values():
            spec = specs[group[0].base_id]
            service = embedding_service(spec)
            if mode != "keyword" and service not in vectors:
                t0 = time.perf_counter()
                vectors[service] = self._embed_question(spec, request, warnings)
                took["embed"] += (time.perf_counter() - t0) * 1000
            plan = fusion_functions.plan(spec, request.question)
            found, legs = self._search_group([r.base_id for r in group], spec, vectors.get(service), terms,
                                             fetch, request, plan, parsed)
            plans[group[0].name] = (plan, found[0] if found else None)
            lists.append((spec.rrf_k, found))
            took["dense"] += legs.dense
            took["keyword"] += legs.keyword
            took["fuse"] += legs.fuse
        candidates = lists[0][1] if len(lists) == 1 else merge_by_rank(lists, fetch)
        # What each base's snippets mark: the statistics the statement read with the candidates.
        weighing = {c.base: c.weighing for _, found in lists for c in found if c.weighing is not None}
        warnings.extend(health_warnings(request.bases, health, mode))
        warnings.extend(unknown_source_warnings(request.bases, health, request.filters))
        if not candidates and not warnings:
            warnings.extend(self._filter_warnings([r.base_id for r in rows], request))
        warnings.extend(tokenizer_warnings({r.name: specs[r.base_id] for r in rows}, mode))

        rerank_scores: dict[int, float] = {}
        reranked = False
        rerank_ms = 0.0
        if reranker_spec is not None and candidates:
            from .chunking import embedding_text  # at first use: a search without reranker needs no chunker (issue 25)

            t0 = time.perf_counter()
            head, tail = candidates[:rerank_candidates(top_k)], candidates[rerank_candidates(top_k):]
            try:
                scores = self.reranker_for(reranker_spec).rerank(
                    request.searched, [embedding_text(c.title, c.headings, c.text) for c in head]
                )
            except RerankerUnavailable as exc:
                warnings.append(SearchWarning("FUSED_ORDER", f"{exc.message}: results in the fused order"))
            else:
                rerank_scores = {c.chunk_id: float(s) for c, s in zip(head, scores)}
                head = sorted(head, key=lambda c: (-rerank_scores[c.chunk_id], -c.fused, c.chunk_id))
                candidates = head + tail
                reranked = True
            rerank_ms = (time.perf_counter() - t0) * 1000
        # SPEC F11, after reranking: facts that hold, then replaced ones, each group in ranked order.
        candidates = order_facts(candidates[:top_k]) + candidates[top_k:]

        if count:  # SPEC F20: a count per base, day and mode; never the question. Never fails nor delays a search
            counts_of(self.count_pool).add([r.base_id for r in rows], mode)
        if parsed.phrases and not candidates:
            warnings.append(SearchWarning("PHRASE_NOT_FOUND", "no chunk holds " + " and ".join(
                f'"{p}"' for p in parsed.phrases) + " as written (words in that order)"))
        return Ranked(
            request=request, candidates=candidates, rerank_scores=rerank_scores, reranked=reranked,
            warnings=warnings, fusion=fusion_echo({r.name: specs[r.base_id] for r in rows}, plans, mode),
            took=Took(embed=took["embed"], dense=took["dense"], keyword=took["keyword"], fuse=took["fuse"],
                      rerank=rerank_ms, total=(time.perf_counter() - started) * 1000),
            weighing=weighing,
        )

    def _search_group(self, base_ids: list[int], spec: BaseSpec, vector: Any, terms: list[str], fetch: int,
                      request: SearchRequest, plan: fusion_functions.Plan,
                      parsed: query_syntax.ParsedQuestion) -> tuple[list[retrieval.Candidate], retrieval.LegTimes]:
        """Run the hybrid statement for bases sharing a model and parameters: one statement for
        one base; for several, one statement per base on connections of their own, at once,
        fused as one statement over them all would (:func:`metis_pg.retrieval.fuse_bases`).

        Per base: on Citus each statement is a router query on the worker holding its base
        (one over several bases is refused), and on one node the bases' statements use the
        cores side by side (docs/scaling.md, docs/performance.md). The legs' times are the
        slowest base's.
        """
        def one(base_id: int, rows: int) -> tuple[list[retrieval.Candidate], retrieval.LegTimes]:
            with self.pool.connection() as conn:
                # A quoted phrase: only the chunks holding it; -word: never the chunks holding it (issue 20).
                only = retrieval.phrase_chunks(conn, [base_id], parsed.phrases) if parsed.phrases else None
                return retrieval.run_search(
                    conn, base_ids=[base_id], model=spec.fingerprint, query_embedding=vector, terms=terms,
                    top_k=rows, legs_top_k=request.top_k, filters=request.filters, k1=spec.k1, b=spec.b,
                    plan=plan, only_chunks=only, exclude_terms=parsed.excluded,
                    mark_terms=query_terms(request.searched))

        if len(base_ids) == 1:
            return one(base_ids[0], fetch)
        every = 2 * retrieval.leg_limit(request.top_k)  # all that either leg of a base kept
        workers = min(len(base_ids), max(1, getattr(self.pool, "max_size", 4) // 2))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="metis-base") as executor:
            answers = list(executor.map(lambda base_id: one(base_id, every), base_ids))
        fused = retrieval.fuse_bases([found for found, _ in answers], legs_top_k=request.top_k, top_k=fetch,
                                     plan=plan)
        return fused, retrieval.LegTimes(dense=max(t.dense for _, t in answers),
                                         keyword=max(t.keyword for _, t in answers),
                                         fuse=max(t.fuse for _, t in answers))

    def _filter_warnings(self, base_ids: list[int], request: SearchRequest) -> list[SearchWarning]:
        """``FILTERS_MATCH_NOTHING`` when the search found nothing because its filters keep no
        document of the bases (a mistyped ``--prefix``), not because nothing matched the question."""
        f = request.filters
        params = f.to_params()
        if params["unfiltered"]:
            return []
        with self.pool.connection() as conn:
            documents = conn.execute(sqlfiles.load("search/filtered_documents"),
                                     {**params, "base_ids": base_ids}).fetchone() is not None
        if documents:
            return []
        asked = f.describe()
        return [SearchWarning("FILTERS_MATCH_NOTHING",
                              f"no document of {', '.join(map(repr, request.bases))} matches the filters ({asked}):"
                              " nothing was searched")]

    def _embed_question(self, spec: BaseSpec, request: SearchRequest, warnings: list[SearchWarning]) -> Any:
        try:
            return self.embedder_for(spec).embed_queries([request.searched])[0]
        except EmbeddingModelUnavailable as exc:
            if request.mode == "dense":  # SPEC F14: refused with EMBEDDING_MODEL_UNAVAILABLE, whatever failed
                if type(exc) is EmbeddingModelUnavailable:
                    raise
                raise EmbeddingModelUnavailable(exc.message) from exc
            warnings.append(SearchWarning("KEYWORD_ONLY", f"{exc.message}: results by keywords only"))
            return None

    @staticmethod
    def _reranker_spec(rows: Sequence[storage.BaseRow], specs: dict[int, BaseSpec], request: SearchRequest,
                       warnings: list[SearchWarning]) -> BaseSpec | None:
        """The spec whose reranker reorders the answer, or None (rerank off, none, or several)."""
        if request.rerank is False:
            return None
        with_reranker = {}
        for r in rows:
            s = specs[r.base_id]
            if s.reranker_model:
                with_reranker.setdefault((s.reranker_model, s.reranker_url, s.reranker_protocol), (r.name, s))
        if len(with_reranker) > 1:
            named = ", ".join(f"{name!r} uses {key[0]!r}" for key, (name, _) in with_reranker.items())
            warnings.append(SearchWarning(
                "FUSED_ORDER", f"the bases searched have different rerankers ({named}), whose scores cannot be "
                               f"compared: results in the fused order",
            ))
            return None
        return next(iter(with_reranker.values()))[1] if with_reranker else None


def embedding_service(spec: BaseSpec) -> tuple:
    """The embedding model *served the same way*: bases sharing it share one question vector (a
    model name at two URLs may answer at one and not the other)."""
    return (spec.fingerprint, spec.embedding_url, spec.embedding_protocol, spec.query_prefix)


def statement_key(spec: BaseSpec) -> tuple:
    """What bases must share to be searched by one statement: the same :func:`embedding_service`
    and the same k1, b, rrf_k, dense_weight and keyword_weight (the statement takes one of each)."""
    return (*embedding_service(spec), spec.k1, spec.b, *(getattr(spec, f) for f in FUSION_FIELDS))


def merge_by_rank(lists: Sequence[tuple[int, list[retrieval.Candidate]]], top_k: int) -> list[retrieval.Candidate]:
    """Merge the fused lists of several statements by RRF over their ranks; return the best `top_k`.

    Each list is one statement's answer, best first, with the rrf_k of its bases:
    a passage at rank r of it scores ``1 / (rrf_k + r)`` (Cormack, Clarke & Buettcher,
    SIGIR 2009). Bases fused in one statement keep their relative order.
    """
    scored = []
    for rrf_k, ranked in lists:
        for rank, c in enumerate(ranked, start=1):
            scored.append((1.0 / (rrf_k + rank), c))
    scored.sort(key=lambda sc: (-sc[0], -sc[1].fused, sc[1].base, sc[1].chunk_id))
    return [c for _, c in scored[:top_k]]

