"""The FastAPI app (SPEC F19): every route, over :class:`~metis_pg.api.Metis`.

Routes (JSON in and out; every route but ``/healthz``, ``/docs`` and
``/openapi.json`` wants ``Authorization: Bearer <token>`` when tokens are set):

==================================  ==============================================================
``GET /healthz``                    liveness, a database round trip, each read replica's lag (no token needed)
``GET /bases``                      every base with its health
``POST /bases``                     create a base (201)
``GET /bases/{name}``               one base with its spec and health
``DELETE /bases/{name}``            drop a base and everything in it
``GET /bases/{name}/status``        status (ready, indexing, waiting), counts, its latest job
``POST /bases/{name}/index``        index folders/files under the source roots: a job (202)
``GET /jobs/{id}``                  a job's state, progress and report
``POST /search``                    search one or several bases: exactly the SPEC F13 JSON
``POST /compare``                   hybrid, dense and keyword side by side, explained (SPEC F15)
``POST /bases/{name}/notes``        add a note (a document of the source ``metis-<name>``) (201)
``GET /bases/{name}/notes``         the notes of a base
``DELETE /bases/{name}/notes/{id}`` delete a note
``POST /bases/{name}/facts``        remember a fact in a memory base (201)
``GET /bases/{name}/facts``         the facts of a memory base (``?holding_only=true``)
==================================  ==============================================================

The question of a search is never logged (the access log has method and path
only; this module logs bases, mode, top_k, result count and time) and never
stored (SPEC F20).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__
from ..analyst import AnalystWatchdog
from ..access import parse_token_groups
from ..api import Metis, connect
from ..config import Settings
from ..errors import (
    BaseNotFound,
    DatabaseUnavailable,
    Forbidden,
    InvalidInput,
    MetisError,
    NotFound,
)
from .console import mount_console
from .errors import error_response, validation_message
from .gate import PRINCIPALS, Gate
from .hosts import parse_allowed_hosts
from .jobs import Jobs
from .model_urls import check_key_env, check_model_url, parse_allow_hosts, parse_key_envs
from .schemas import (
    ERRORS,
    CompareIn,
    CreateBaseIn,
    ErrorOut,
    FactIn,
    IndexIn,
    NameParam,
    NoteIn,
    SearchIn,
    SearchOut,
)
from .settings import MIN_TOKEN_CHARS, Limits, parse_source_roots, parse_tokens
from . import swagger
from .sources import resolve_source_path

__all__ = ["create_app"]

log = logging.getLogger(__name__)

DESCRIPTION = """\
Hybrid search over documents in PostgreSQL (SPEC F19): exact cosine (pgvector) and
BM25 over metis_pg's own term tables, fused by reciprocal rank in one SQL statement.

Send `Authorization: Bearer <token>` (a token of `METIS_API_TOKENS`) to every route
but `/healthz`, `/docs` and `/openapi.json`. Errors are
`{"error": {"code": "...", "message": "..."}}`.
"""


def create_app(
    metis: Metis | None = None,
    *,
    tokens: str | Sequence[str] | None = None,
    source_roots: str | Sequence[str | os.PathLike] | None = None,
    max_body_bytes: int | None = None,
    max_inflight_searches: int | None = None,
    request_read_timeout_s: float | None = None,
    keep_alive_timeout_s: float | None = None,
    max_connections: int | None = None,
    model_url_allow_hosts: str | Sequence[str] | None = None,
    allowed_hosts: str | Sequence[str] | None = None,
    search_workers: int | None = None,
    search_queue_s: float | None = None,
    settings: Settings | None = None,
) -> FastAPI:
    """Return the metis HTTP app (SPEC F19) serving `metis`.

    Args:
        metis: the database to serve; None opens :func:`~metis_pg.api.connect` ()
            (``METIS_DATABASE_URL`` or the embedded server), closed at shutdown.
        tokens: bearer tokens; None reads ``METIS_API_TOKENS``; empty = no auth
            (bind loopback only: :func:`serve` refuses anything else).
        source_roots: folders indexing may read; None reads ``METIS_SOURCE_ROOTS``.
        max_body_bytes: largest request body; None reads ``METIS_MAX_BODY_BYTES`` (default 1 MB).
        max_inflight_searches, request_read_timeout_s, keep_alive_timeout_s, max_connections:
            the :class:`~metis_pg.service.settings.Limits`; None takes `settings`' value. The
            last three are kept by the server (:func:`serve`, :func:`running`), which reads
            them from ``app.state.limits``.
        model_url_allow_hosts: ``host[:port]`` items whose model URLs ``POST /bases`` may
            name (:mod:`~metis_pg.service.model_urls`); None takes `settings`' value
            (``METIS_MODEL_URL_ALLOW_HOSTS``, default none).
        allowed_hosts: ``host[:port]`` items the token-less service answers to besides
            loopback (:mod:`~metis_pg.service.hosts`); None takes ``METIS_ALLOWED_HOSTS``.
        search_workers, search_queue_s: searches computed at the same moment, and the seconds an
            admitted one may wait for its turn (then 503); None takes `settings`' value.
        settings: process settings (default :meth:`Settings.from_env`).

    Raises:
        ConfigError: a token too short, a source root that is not a folder, a limit not positive.
    """
    settings = settings or Settings.from_env()
    # Entries TOKEN or TOKEN=group+group (issue 21): the gate knows the tokens, the routes their groups.
    token_groups = parse_token_groups(parse_tokens(settings.api_tokens if tokens is None else tokens),
                                     min_chars=MIN_TOKEN_CHARS)
    token_list = tuple(token_groups)
    roots = parse_source_roots(settings.source_roots if source_roots is None else source_roots)
    limits = Limits.resolve(
        settings, max_body_bytes=max_body_bytes, max_inflight_searches=max_inflight_searches,
        request_read_timeout_s=request_read_timeout_s, keep_alive_timeout_s=keep_alive_timeout_s,
        max_connections=max_connections, search_workers=search_workers, search_queue_s=search_queue_s,
    )
    hosts = parse_allowed_hosts(settings.allowed_hosts if allowed_hosts is None else allowed_hosts)
    allowed_model_hosts = parse_allow_hosts(
        settings.model_url_allow_hosts if model_url_allow_hosts is None else model_url_allow_hosts
    )
    allowed_key_envs = parse_key_envs(settings.model_key_envs)
    owned = metis is None
    from ..mcp_server import add_http_routes  # the MCP SDK, imported when an app is made

    db = metis if metis is not None else connect()
    jobs = Jobs(db, roots)

    # Statements of the analysts that run past their limit, even with statement_timeout lifted.
    watchdog = AnalystWatchdog(db.pool, settings.analyst_watchdog_interval_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        watchdog.start()
        try:
            async with app.state.mcp.session_manager.run():  # the MCP endpoint /mcp (metis_pg.mcp_server)
                yield
        finally:
            watchdog.stop()
        jobs.close()
        if owned:
            db.close()

    app = FastAPI(
        title="metis_pg", version=__version__, description=DESCRIPTION, lifespan=lifespan,
        docs_url=None, redoc_url=None, openapi_url="/openapi.json",
    )
    swagger.install(app, title="metis_pg")  # /docs with its assets served from a package, not a CDN
    app.state.mcp = add_http_routes(app, db, loopback_only=not token_list,  # MCP at /mcp, behind the gate
                                    principals_of=lambda request: principals_of(request, bool(token_list)))
    app.state.metis = db
    app.state.jobs = jobs
    app.state.analyst_watchdog = watchdog
    app.state.limits = limits
    app.state.source_roots = roots
    app.add_middleware(Gate, tokens=token_list, limits=limits, allowed_hosts=hosts, token_groups=token_groups)

    def caller(request: Request) -> tuple[str, ...] | None:
        return principals_of(request, bool(token_list))

    def writer(request: Request) -> None:
        """Let only a token without groups change anything (issue 21): a token with groups could
        otherwise index a folder again without its readers, or as a new source, and read it."""
        groups = caller(request)
        if groups:
            raise Forbidden(f"this token reads for the groups {', '.join(groups)} and changes nothing: creating, "
                            "dropping and indexing bases, notes and facts need a token of METIS_API_TOKENS "
                            "without groups")

    changes = [Depends(writer)]

    @app.exception_handler(MetisError)
    async def _metis_error(request: Request, exc: MetisError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(InvalidInput(validation_message(exc)))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return error_response(NotFound(f"no route {request.method} {request.url.path}: see /docs"))
        if exc.status_code == 405:
            return error_response(InvalidInput(f"method {request.method} is not allowed on {request.url.path}"))
        return error_response(InvalidInput(str(exc.detail)))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(MetisError("internal error: see the server log"))

    bearer = HTTPBearer(auto_error=False, description="a token of METIS_API_TOKENS")
    # The gate checks the token; this dependency only shows the scheme in /docs and the OpenAPI schema.
    api = APIRouter(dependencies=[Depends(bearer)], responses=ERRORS)

    @app.get("/healthz", summary="Liveness and a database round trip (no token needed)")
    def healthz() -> dict[str, Any]:
        try:
            with db.pool.connection(timeout=5) as conn:
                conn.execute("SELECT 1")
        except DatabaseUnavailable as exc:
            # The primary down: with a healthy read replica the service still answers reads
            # (docs/scaling.md), so it is degraded, not down.
            statuses = db.replica_status()
            if not any(r.status == "ok" for r in statuses):
                raise
            return {"status": "degraded", "database": f"unavailable: {exc.message}", "version": __version__,
                    "replicas": [r.to_dict() for r in statuses]}
        except MetisError:
            raise
        except Exception as exc:
            raise DatabaseUnavailable(f"the database did not answer: {type(exc).__name__}") from exc
        # Read replicas (METIS_READ_DATABASE_URLS): each one's status and replay lag, measured now.
        replicas = [r.to_dict() for r in db.replica_status()]
        return {"status": "ok", "database": "ok", "version": __version__, "replicas": replicas}

    @api.get("/bases", summary="Every base with its health")
    def list_bases(request: Request) -> dict[str, Any]:
        # Counted for the token's groups (the console's Bases page): a hidden document is no count.
        return {"bases": [b.to_dict() for b in db.list_bases(principals=caller(request))]}

    @api.post("/bases", status_code=201, summary="Create a base", responses={409: {"model": ErrorOut}}, dependencies=changes)
    def create_base(body: CreateBaseIn) -> JSONResponse:
        for field in ("embedding_url", "reranker_url"):
            if getattr(body, field) is not None:
                check_model_url(field, getattr(body, field), allowed_model_hosts)
        for field in ("embedding_api_key_env", "reranker_api_key_env"):
            if getattr(body, field) is not None:
                check_key_env(field, getattr(body, field), allowed_key_envs)
        options = body.model_dump(exclude={"name", "kind"}, exclude_none=True)
        info = db.create_base(body.name, kind=body.kind, **options)
        return JSONResponse(info.to_dict(), status_code=201)

    @api.get("/bases/{name}", summary="A base with its spec and health", responses={404: {"model": ErrorOut}})
    def get_base(name: NameParam, request: Request) -> dict[str, Any]:
        return db.base(name, principals=caller(request)).to_dict()

    @api.delete("/bases/{name}", summary="Drop a base and everything in it", responses={404: {"model": ErrorOut}}, dependencies=changes)
    def drop_base(name: NameParam) -> dict[str, Any]:
        db.drop_base(name)
        return {"dropped": name}

    @api.get("/bases/{name}/status", summary="Status, counts and the latest indexing job",
             responses={404: {"model": ErrorOut}})
    def base_status(name: NameParam, request: Request) -> dict[str, Any]:
        info = db.base(name, principals=caller(request))
        job = jobs.latest(name)
        return {
            "name": info.name,
            "status": info.status,
            "documents": info.documents,
            "chunks": info.chunks,
            "chunks_without_vector": info.chunks_without_vector,
            "without_vector_by_reason": info.without_vector_by_reason,
            "chunks_cut": info.chunks_cut,
            "vectors_reused": info.vectors_reused,
            "last_indexed_at": info.last_indexed_at,
            "job": job.to_dict() if job else None,
        }

    @api.post("/bases/{name}/index", status_code=202, summary="Index folders or files under the source roots (a job)",
              responses={404: {"model": ErrorOut}}, dependencies=changes)
    def index(name: NameParam, body: IndexIn) -> JSONResponse:
        for path in body.paths:
            resolve_source_path(path, roots)  # 400 before a base is created
        try:
            db.base(name)
        except BaseNotFound:
            db.create_base(name)  # as Metis.index does; a bad name is refused here, not in the job
        job = jobs.submit(name, body.paths, body.source, readers=body.readers,
                          front_matter_readers=body.front_matter_readers)
        return JSONResponse(job.to_dict(), status_code=202, headers={"Location": f"/jobs/{job.id}"})

    @api.get("/jobs/{job_id}", summary="An indexing job: state, progress, report", responses={404: {"model": ErrorOut}})
    def get_job(job_id: Annotated[str, PathParam(max_length=64)]) -> dict[str, Any]:
        return jobs.get(job_id).to_dict()

    @api.post("/search", summary="Search one or several bases (the SPEC F13 answer)",
              responses={200: {"model": SearchOut}, 404: {"model": ErrorOut}, 503: {"model": ErrorOut}})
    def search(body: SearchIn, request: Request) -> JSONResponse:
        started = time.perf_counter()
        filters = body.filters.model_dump(exclude_none=True) if body.filters else None
        fusion = body.fusion.model_dump(exclude_none=True) if body.fusion else None
        answer = db.search(body.bases, body.question, mode=body.mode, top_k=body.top_k, rerank=body.rerank,
                           filters=filters, fusion=fusion, consistent=body.consistent, per_document=body.per_document,
                           principals=caller(request))
        # Never the question: bases, mode, top_k, counts and time only.
        log.info("search bases=%s mode=%s top_k=%d results=%d %.1f ms", ",".join(answer.bases), body.mode,
                 body.top_k, len(answer.results), (time.perf_counter() - started) * 1000)
        return JSONResponse(answer.to_dict())

    @api.post("/compare", summary="One question asked hybrid, dense and keyword, side by side (SPEC F15)",
              responses={404: {"model": ErrorOut}})
    def compare(body: CompareIn, request: Request) -> JSONResponse:
        filters = body.filters.model_dump(exclude_none=True) if body.filters else None
        fusion = body.fusion.model_dump(exclude_none=True) if body.fusion else None
        result = db.compare(body.bases, body.question, top_k=body.top_k, rerank=body.rerank, filters=filters,
                            fusion=fusion, principals=caller(request))
        return JSONResponse(result.to_dict())

    @api.post("/bases/{name}/notes", status_code=201, summary="Add a note (a document of the source metis-<name>)",
              responses={404: {"model": ErrorOut}}, dependencies=changes)
    def add_note(name: NameParam, body: NoteIn) -> JSONResponse:
        note_id = db.add_note(name, body.title, body.text)
        return JSONResponse({"note_id": note_id, "base": name, "source": f"metis-{name}"}, status_code=201)

    @api.get("/bases/{name}/notes", summary="The notes of a base, oldest first", responses={404: {"model": ErrorOut}})
    def list_notes(name: NameParam, request: Request) -> dict[str, Any]:
        return {"notes": [n.to_dict() for n in db.notes(name, principals=caller(request))]}

    @api.delete("/bases/{name}/notes/{note_id}", summary="Delete a note", responses={404: {"model": ErrorOut}}, dependencies=changes)
    def delete_note(name: NameParam, note_id: int) -> dict[str, Any]:
        db.delete_note(name, note_id)
        return {"deleted": note_id}

    @api.post("/bases/{name}/facts", status_code=201, summary="Remember a fact in a memory base (SPEC F11)",
              responses={404: {"model": ErrorOut}}, dependencies=changes)
    def remember(name: NameParam, body: FactIn) -> JSONResponse:
        fact_id = db.remember(name, body.text, key=body.key, supersedes=body.supersedes, observed_at=body.observed_at)
        return JSONResponse({"fact_id": fact_id, "base": name}, status_code=201)

    @api.get("/bases/{name}/facts", summary="The facts of a memory base, in the order observed",
             responses={404: {"model": ErrorOut}})
    def list_facts(name: NameParam, request: Request, holding_only: bool = False) -> dict[str, Any]:
        return {"facts": [f.to_dict() for f in db.facts(name, holding_only=holding_only,
                                                        principals=caller(request))]}

    app.include_router(api)
    mount_console(app)  # the console's pages at / and /console/ (issue 11)
    return app


def principals_of(request: Request, tokens_on: bool) -> tuple[str, ...] | None:
    """The principals a request reads on behalf of (issue 21): its token's groups, which only the gate
    sets (``METIS_API_TOKENS`` entries ``TOKEN=group+group``; a token without groups: ``()``, documents
    without readers only); None (every document) when the service has no token (loopback only).
    Never from the request's body or headers.

    Raises:
        AttributeError: tokens are on and the gate set nothing (a bug): the request fails, never reads all.
    """
    if not tokens_on:
        return None
    return tuple(getattr(request.state, PRINCIPALS))


# -- running it --------------------------------------------------------------
