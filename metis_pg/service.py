"""The HTTP service (SPEC F19): ``metis serve``, a FastAPI app over :class:`~metis_pg.api.Metis`.

Routes (JSON in and out; every route but ``/healthz``, ``/docs`` and
``/openapi.json`` wants ``Authorization: Bearer <token>`` when tokens are set):

==================================  ==============================================================
``GET /healthz``                    liveness and a database round trip (no token needed)
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

Errors are ``{"error": {"code", "message"}}`` with the status of the
:mod:`~metis_pg.errors` class, built by one function (:func:`error_response`)
for every path: the exception handlers, request validation (400
``INVALID_REQUEST``), unknown routes (404 ``NOT_FOUND``), and the gate in front
of the app that answers 401 ``UNAUTHORIZED`` and 413 ``REQUEST_TOO_LARGE``
before a body is read or parsed.

Settings (environment; arguments of :func:`create_app` and :func:`serve` win):

==========================  ===========  ====================================================
``METIS_API_TOKENS``        (none)       bearer tokens, comma-separated, 16+ characters each;
                                         with none the service binds loopback only
``METIS_SOURCE_ROOTS``      (none)       folders indexing may read, colon-separated; with
                                         none, indexing through HTTP is refused
``METIS_MAX_BODY_BYTES``    1000000      largest request body; more is 413
==========================  ===========  ====================================================

The question of a search is never logged (the access log has method and path
only; this module logs bases, mode, top_k, result count and time) and never
stored (SPEC F20).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import socket
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Path as PathParam, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import __version__
from .api import MAX_QUESTION_CHARS, MAX_TOP_K, Metis, connect
from .errors import (
    BaseNotFound,
    ConfigError,
    DatabaseUnavailable,
    InvalidInput,
    MetisError,
    NotFound,
    RequestTooLarge,
    Unauthorized,
)

__all__ = [
    "create_app",
    "serve",
    "running",
    "error_response",
    "parse_tokens",
    "parse_source_roots",
    "check_bind",
    "resolve_source_path",
    "DEFAULT_MAX_BODY_BYTES",
    "MIN_TOKEN_CHARS",
    "SETTINGS",
]

log = logging.getLogger(__name__)

#: Largest request body in bytes (``METIS_MAX_BODY_BYTES``); more is HTTP 413.
DEFAULT_MAX_BODY_BYTES = 1_000_000
#: Shortest bearer token accepted in ``METIS_API_TOKENS``.
MIN_TOKEN_CHARS = 16
#: Bases one search may name at most.
MAX_BASES_PER_SEARCH = 20
#: Paths one indexing job may name at most.
MAX_PATHS_PER_JOB = 100
#: Finished jobs kept in memory for ``GET /jobs/{id}`` (oldest forgotten first).
KEEP_JOBS = 500

#: (environment variable, default, help): every setting of the service, documented in docs/http.md.
SETTINGS: tuple[tuple[str, str, str], ...] = (
    ("METIS_API_TOKENS", "", "bearer tokens, comma-separated, 16+ characters each; none: loopback only"),
    ("METIS_SOURCE_ROOTS", "", "folders indexing through HTTP may read, colon-separated; none: indexing refused"),
    ("METIS_MAX_BODY_BYTES", str(DEFAULT_MAX_BODY_BYTES), "largest request body in bytes; more is HTTP 413"),
)

#: Paths that answer without a token: liveness and the API's own description.
OPEN_PATHS = frozenset({"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect"})

DESCRIPTION = """\
Hybrid search over documents in PostgreSQL (SPEC F19): exact cosine (pgvector) and
BM25 over metis_pg's own term tables, fused by reciprocal rank in one SQL statement.

Send `Authorization: Bearer <token>` (a token of `METIS_API_TOKENS`) to every route
but `/healthz`, `/docs` and `/openapi.json`. Errors are
`{"error": {"code": "...", "message": "..."}}`.
"""


# -- settings ----------------------------------------------------------------


def parse_tokens(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """Return the bearer tokens of `value` (comma-separated text or a list), blanks dropped.

    Raises:
        ConfigError: a token shorter than :data:`MIN_TOKEN_CHARS` characters.
    """
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    tokens = tuple(t.strip() for t in items if t and t.strip())
    short = [t for t in tokens if len(t) < MIN_TOKEN_CHARS]
    if short:
        raise ConfigError(
            f"a token of METIS_API_TOKENS has {len(short[0])} characters; use at least {MIN_TOKEN_CHARS} "
            "(for example: openssl rand -hex 24)"
        )
    return tokens


def parse_source_roots(value: str | Sequence[str | os.PathLike] | None) -> tuple[Path, ...]:
    """Return the source roots of `value` (colon-separated text or a list), resolved (symlinks followed).

    Raises:
        ConfigError: a root that is not an existing folder.
    """
    if value is None:
        return ()
    items = value.split(":") if isinstance(value, str) else list(value)
    roots = []
    for item in items:
        if not str(item).strip():
            continue
        root = Path(os.path.realpath(Path(item).expanduser()))
        if not root.is_dir():
            raise ConfigError(f"source root {str(item)!r} of METIS_SOURCE_ROOTS is not a folder")
        roots.append(root)
    return tuple(dict.fromkeys(roots))


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, tokens: Sequence[str]) -> None:
    """Refuse to serve beyond loopback without a token.

    Raises:
        ConfigError: `host` is not a loopback address and no token is configured.
    """
    if not tokens and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host!r} without a token: anyone who reaches it could read and drop "
            "every base. Set METIS_API_TOKENS (comma-separated, 16+ characters each) or bind 127.0.0.1"
        )


def resolve_source_path(raw: str, roots: Sequence[Path]) -> Path:
    """Return the real path of `raw` (absolute, or relative to a source root) inside a source root.

    Symbolic links are followed before the check, so neither ``..`` nor a link can
    lead out of the roots. A relative path is looked up in each root, in order.

    Raises:
        InvalidInput: no roots configured, or the path is outside every root or does not exist.
    """
    if not roots:
        raise InvalidInput("indexing through HTTP is off: set METIS_SOURCE_ROOTS to the folders it may read")
    if not raw or "\x00" in raw:
        raise InvalidInput("a path must be a non-empty string without NUL characters")
    path = Path(raw)
    candidates = [path] if path.is_absolute() else [root / path for root in roots]
    inside = False
    for candidate in candidates:
        real = Path(os.path.realpath(candidate))
        if any(real == root or real.is_relative_to(root) for root in roots):
            inside = True
            if real.exists():
                return real
    if inside:
        raise InvalidInput(f"no such file or folder under the source roots: {raw!r}")
    raise InvalidInput(f"path {raw!r} is outside the source roots: indexing reads only under METIS_SOURCE_ROOTS")


# -- the one error builder ---------------------------------------------------


def error_response(exc: MetisError) -> JSONResponse:
    """Return the one JSON error answer: ``{"error": {"code", "message"}}`` with ``exc.http_status``."""
    headers = {"WWW-Authenticate": 'Bearer realm="metis"'} if isinstance(exc, Unauthorized) else None
    return JSONResponse(exc.to_dict(), status_code=exc.http_status, headers=headers)


def _validation_message(exc: RequestValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "invalid request"
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "path", "query"))
    message = str(first.get("msg", "invalid value"))
    if first.get("type") == "json_invalid":
        return "the body is not valid JSON"
    return f"{where}: {message}" if where else message


class _Gate:
    """ASGI middleware in front of the app: bearer token (401), then body size (413).

    Both are decided before the app reads or parses anything: a token is checked
    from the headers; a body is refused at once when its ``Content-Length`` is too
    large, else read up to the limit (chunked bodies too) and replayed to the app.
    """

    def __init__(self, app: ASGIApp, *, tokens: Sequence[str], max_body_bytes: int) -> None:
        self.app = app
        self.tokens = tuple(t.encode("utf-8") for t in tokens)
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.tokens and scope["path"] not in OPEN_PATHS and not self._authorized(scope):
            await error_response(Unauthorized("a valid bearer token is required: Authorization: Bearer <token>"))(
                scope, receive, send
            )
            return
        length = _header(scope, b"content-length")
        if length is not None:
            if not length.isdigit():
                await error_response(InvalidInput("Content-Length is not a number"))(scope, receive, send)
                return
            if int(length) > self.max_body_bytes:
                await error_response(self._too_large(int(length)))(scope, receive, send)
                return
        if scope["method"] in ("GET", "HEAD", "OPTIONS") and length is None:
            await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body.extend(message.get("body", b""))
            if len(body) > self.max_body_bytes:
                await error_response(self._too_large(None))(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(bytes(body), receive), send)

    def _too_large(self, length: int | None) -> RequestTooLarge:
        size = f"{length} bytes" if length is not None else "more"
        return RequestTooLarge(f"the request body is {size}; the limit is {self.max_body_bytes} bytes")

    def _authorized(self, scope: Scope) -> bool:
        value = _header(scope, b"authorization") or ""
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return False
        given = token.strip().encode("utf-8", "surrogateescape")
        # Compare with every token (constant time each), so timing says nothing of which matched.
        matches = [hmac.compare_digest(given, t) for t in self.tokens]
        return any(matches)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1").strip()
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


# -- request and response bodies ---------------------------------------------


def _clean_text(value: str) -> str:
    """Refuse text PostgreSQL cannot store (NUL) or that is not valid Unicode (lone surrogates)."""
    if "\x00" in value:
        raise ValueError("text must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text must be valid Unicode (no lone surrogates)") from None
    return value


def _text(min_length: int | None = None, max_length: int | None = None) -> Any:
    """A JSON string field: length bounds (characters), no NUL, valid Unicode."""
    return Annotated[str, Field(strict=True, min_length=min_length, max_length=max_length), AfterValidator(_clean_text)]


BaseName = _text(1, 63)
#: A base name in a route's path.
NameParam = Annotated[str, PathParam(min_length=1, max_length=63), AfterValidator(_clean_text)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FiltersIn(_Body):
    """Filters applied inside both legs before ranking (SPEC F10)."""

    path_prefix: _text(None, 1000) | None = None
    kinds: Annotated[list[_text(None, 10)], Field(max_length=10)] | None = None
    sources: Annotated[list[_text(None, 200)], Field(max_length=100)] | None = None


class SearchIn(_Body):
    """A search (SPEC F5-F12)."""

    bases: BaseName | Annotated[list[BaseName], Field(min_length=1, max_length=MAX_BASES_PER_SEARCH)] = Field(
        description="a base name, or several (results merged, each names its base)"
    )
    question: _text(1, MAX_QUESTION_CHARS)
    mode: Literal["hybrid", "dense", "keyword"] = "hybrid"
    top_k: StrictInt = Field(10, ge=1, le=MAX_TOP_K)
    rerank: StrictBool | None = Field(None, description="false skips the reranker; null/true use it if the base has one")
    filters: FiltersIn | None = None


class CompareIn(_Body):
    """One question asked three ways (SPEC F15)."""

    bases: BaseName | Annotated[list[BaseName], Field(min_length=1, max_length=MAX_BASES_PER_SEARCH)]
    question: _text(1, MAX_QUESTION_CHARS)
    top_k: StrictInt = Field(10, ge=1, le=MAX_TOP_K)
    rerank: StrictBool | None = None
    filters: FiltersIn | None = None


class CreateBaseIn(_Body):
    """A new base (SPEC F1). API-key settings are not accepted over HTTP."""

    name: BaseName
    kind: Literal["documents", "memory"] = "documents"
    embedding_model: _text(None, 200) | None = None
    embedding_url: _text(None, 2000) | None = None
    embedding_dim: Annotated[StrictInt, Field(ge=1, le=16000)] | None = None
    embedding_protocol: Literal["openai", "tei"] = "openai"
    query_prefix: _text(None, 2000) | None = None
    reranker_model: _text(None, 200) | None = None
    reranker_url: _text(None, 2000) | None = None
    reranker_protocol: Literal["cohere", "tei", "infinity"] = "cohere"
    model_timeout_s: Annotated[float, Field(gt=0, le=600)] = 10.0
    chunk_size: Annotated[StrictInt, Field(ge=200, le=20000)] = 1200


class IndexIn(_Body):
    """Folders or files to index, absolute or relative to a source root (``METIS_SOURCE_ROOTS``)."""

    paths: Annotated[list[_text(1, 4096)], Field(min_length=1, max_length=MAX_PATHS_PER_JOB)]
    source: _text(1, 200) | None = None


class NoteIn(_Body):
    """A note: a document of the base's own source ``metis-<base>`` (SPEC F2)."""

    title: _text(1, 500)
    text: _text(1, 200_000)


class FactIn(_Body):
    """A fact of a memory base (SPEC F11); it may replace an older one (same key, or named)."""

    text: _text(1, 20_000)
    key: _text(1, 500) | None = Field(None, description="what the fact is about; a newer fact with this key replaces it")
    supersedes: StrictInt | None = Field(None, description="id of the fact this one replaces")
    observed_at: _text(1, 64) | None = Field(None, description="when it was true, ISO 8601 (default: now)")


class ErrorDetail(BaseModel):
    code: str = Field(description="stable code: INVALID_REQUEST, UNAUTHORIZED, BASE_NOT_FOUND, ...")
    message: str


class ErrorOut(BaseModel):
    """Every error answer."""

    error: ErrorDetail


class CitationOut(BaseModel):
    source: str
    document: str
    title: str
    kind: str
    page: int | None = Field(None, description="PDF page (absent for other kinds)")
    line: int | None = Field(None, description="first line (absent for PDF)")
    headings: list[str]
    snippet: str


class ScoresOut(BaseModel):
    """Each key is absent where that step did not find or score the passage."""

    dense: float | None = None
    dense_rank: int | None = None
    keyword: float | None = None
    keyword_rank: int | None = None
    fused: float | None = None
    rerank: float | None = None


class ResultOut(BaseModel):
    score: float
    text: str
    base: str
    citation: CitationOut
    scores: ScoresOut
    chunk_id: int
    holds: bool | None = Field(None, description="memory bases: whether the fact still holds")


class WarningOut(BaseModel):
    code: str
    message: str


class TookOut(BaseModel):
    embed: float
    dense: float
    keyword: float
    fuse: float
    rerank: float
    total: float


class SearchOut(BaseModel):
    """The SPEC F13 answer (documentation only: the body is ``SearchResponse.to_dict()``)."""

    mode: str
    reranked: bool
    bases: list[str]
    results: list[ResultOut]
    warnings: list[WarningOut]
    took: TookOut


_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "INVALID_REQUEST (also a body that fails validation)"},
    401: {"model": ErrorOut, "description": "UNAUTHORIZED: no or wrong bearer token"},
    413: {"model": ErrorOut, "description": "REQUEST_TOO_LARGE"},
}


# -- indexing jobs -----------------------------------------------------------


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


@dataclass
class Job:
    """An indexing run started through HTTP; read through ``GET /jobs/{id}``."""

    id: str
    base: str
    paths: list[str]
    source: str | None
    state: str = "queued"  # queued, running, done, failed
    documents_done: int = 0
    documents_total: int | None = None
    chunks: int = 0
    report: dict[str, Any] | None = None
    error: dict[str, str] | None = None
    created_at: str = field(default_factory=_now)
    started_at: str | None = None
    finished_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "base": self.base,
            "paths": list(self.paths),
            "source": self.source,
            "state": self.state,
            "progress": {
                "documents_done": self.documents_done,
                "documents_total": self.documents_total,
                "chunks": self.chunks,
            },
            "report": self.report,
            "error": self.error,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }


class Jobs:
    """Indexing jobs run one at a time on a worker thread; the last :data:`KEEP_JOBS` are kept."""

    def __init__(self, metis: Metis) -> None:
        self.metis = metis
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metis-index")
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()

    def submit(self, base: str, paths: list[Path], source: str | None) -> Job:
        job = Job(id=uuid.uuid4().hex, base=base, paths=[str(p) for p in paths], source=source)
        with self._lock:
            self._jobs[job.id] = job
            while len(self._jobs) > KEEP_JOBS:
                self._jobs.popitem(last=False)
        self._executor.submit(self._run, job, paths)
        return job

    def _run(self, job: Job, paths: list[Path]) -> None:
        job.state, job.started_at = "running", _now()

        def progress(done: int, total: int, chunks: int) -> None:
            job.documents_done, job.documents_total, job.chunks = done, total, chunks

        try:
            report = self.metis.index(job.base, *paths, source=job.source, on_progress=progress)
        except MetisError as exc:
            job.error, job.state = exc.to_dict()["error"], "failed"
        except Exception:
            log.exception("indexing job %s of base %s failed", job.id, job.base)
            job.error, job.state = MetisError("internal error: see the server log").to_dict()["error"], "failed"
        else:
            job.report, job.state = report.to_dict(), "done"
        finally:
            job.finished_at = _now()
        log.info("indexing job %s of base %s: %s", job.id, job.base, job.state)

    def get(self, job_id: str) -> Job:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise NotFound(f"no indexing job {job_id!r} (jobs are kept in memory until the service restarts)")
        return job

    def latest(self, base: str) -> Job | None:
        with self._lock:
            for job in reversed(self._jobs.values()):
                if job.base == base:
                    return job
        return None

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


# -- the app -----------------------------------------------------------------


def create_app(
    metis: Metis | None = None,
    *,
    tokens: str | Sequence[str] | None = None,
    source_roots: str | Sequence[str | os.PathLike] | None = None,
    max_body_bytes: int | None = None,
) -> FastAPI:
    """Return the metis HTTP app (SPEC F19) serving `metis`.

    Args:
        metis: the database to serve; None opens :func:`~metis_pg.api.connect` ()
            (``METIS_DATABASE_URL`` or the embedded server), closed at shutdown.
        tokens: bearer tokens; None reads ``METIS_API_TOKENS``; empty = no auth
            (bind loopback only: :func:`serve` refuses anything else).
        source_roots: folders indexing may read; None reads ``METIS_SOURCE_ROOTS``.
        max_body_bytes: largest request body; None reads ``METIS_MAX_BODY_BYTES`` (default 1 MB).

    Raises:
        ConfigError: a token too short, a source root that is not a folder.
    """
    token_list = parse_tokens(os.environ.get("METIS_API_TOKENS") if tokens is None else tokens)
    roots = parse_source_roots(os.environ.get("METIS_SOURCE_ROOTS") if source_roots is None else source_roots)
    if max_body_bytes is None:
        raw = os.environ.get("METIS_MAX_BODY_BYTES", str(DEFAULT_MAX_BODY_BYTES))
        if not raw.isdigit() or int(raw) < 1:
            raise ConfigError(f"METIS_MAX_BODY_BYTES must be a positive number of bytes, not {raw!r}")
        max_body_bytes = int(raw)
    owned = metis is None
    db = metis if metis is not None else connect()
    jobs = Jobs(db)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        jobs.close()
        if owned:
            db.close()

    app = FastAPI(
        title="metis_pg", version=__version__, description=DESCRIPTION, lifespan=lifespan,
        docs_url="/docs", redoc_url=None, openapi_url="/openapi.json",
    )
    app.state.metis = db
    app.state.jobs = jobs
    app.state.source_roots = roots
    app.add_middleware(_Gate, tokens=token_list, max_body_bytes=max_body_bytes)

    @app.exception_handler(MetisError)
    async def _metis_error(request: Request, exc: MetisError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(InvalidInput(_validation_message(exc)))

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
    api = APIRouter(dependencies=[Depends(bearer)], responses=_ERRORS)

    @app.get("/healthz", summary="Liveness and a database round trip (no token needed)")
    def healthz() -> dict[str, Any]:
        try:
            with db.pool.connection(timeout=5) as conn:
                conn.execute("SELECT 1")
        except MetisError:
            raise
        except Exception as exc:
            raise DatabaseUnavailable(f"the database did not answer: {type(exc).__name__}") from exc
        return {"status": "ok", "database": "ok", "version": __version__}

    @api.get("/bases", summary="Every base with its health")
    def list_bases() -> dict[str, Any]:
        return {"bases": [b.to_dict() for b in db.list_bases()]}

    @api.post("/bases", status_code=201, summary="Create a base", responses={409: {"model": ErrorOut}})
    def create_base(body: CreateBaseIn) -> JSONResponse:
        options = body.model_dump(exclude={"name", "kind"}, exclude_none=True)
        info = db.create_base(body.name, kind=body.kind, **options)
        return JSONResponse(info.to_dict(), status_code=201)

    @api.get("/bases/{name}", summary="A base with its spec and health", responses={404: {"model": ErrorOut}})
    def get_base(name: NameParam) -> dict[str, Any]:
        return db.base(name).to_dict()

    @api.delete("/bases/{name}", summary="Drop a base and everything in it", responses={404: {"model": ErrorOut}})
    def drop_base(name: NameParam) -> dict[str, Any]:
        db.drop_base(name)
        return {"dropped": name}

    @api.get("/bases/{name}/status", summary="Status, counts and the latest indexing job",
             responses={404: {"model": ErrorOut}})
    def base_status(name: NameParam) -> dict[str, Any]:
        info = db.base(name)
        job = jobs.latest(name)
        return {
            "name": info.name,
            "status": info.status,
            "documents": info.documents,
            "chunks": info.chunks,
            "chunks_without_vector": info.chunks_without_vector,
            "last_indexed_at": info.last_indexed_at,
            "job": job.to_dict() if job else None,
        }

    @api.post("/bases/{name}/index", status_code=202, summary="Index folders or files under the source roots (a job)",
              responses={404: {"model": ErrorOut}})
    def index(name: NameParam, body: IndexIn) -> JSONResponse:
        paths = [resolve_source_path(p, roots) for p in body.paths]
        try:
            db.base(name)
        except BaseNotFound:
            db.create_base(name)  # as Metis.index does; a bad name is refused here, not in the job
        job = jobs.submit(name, paths, body.source)
        return JSONResponse(job.to_dict(), status_code=202, headers={"Location": f"/jobs/{job.id}"})

    @api.get("/jobs/{job_id}", summary="An indexing job: state, progress, report", responses={404: {"model": ErrorOut}})
    def get_job(job_id: Annotated[str, PathParam(max_length=64)]) -> dict[str, Any]:
        return jobs.get(job_id).to_dict()

    @api.post("/search", summary="Search one or several bases (the SPEC F13 answer)",
              responses={200: {"model": SearchOut}, 404: {"model": ErrorOut}, 503: {"model": ErrorOut}})
    def search(body: SearchIn) -> JSONResponse:
        started = time.perf_counter()
        filters = body.filters.model_dump(exclude_none=True) if body.filters else None
        answer = db.search(body.bases, body.question, mode=body.mode, top_k=body.top_k, rerank=body.rerank,
                           filters=filters)
        # Never the question: bases, mode, top_k, counts and time only.
        log.info("search bases=%s mode=%s top_k=%d results=%d %.1f ms", ",".join(answer.bases), body.mode,
                 body.top_k, len(answer.results), (time.perf_counter() - started) * 1000)
        return JSONResponse(answer.to_dict())

    @api.post("/compare", summary="One question asked hybrid, dense and keyword, side by side (SPEC F15)",
              responses={404: {"model": ErrorOut}})
    def compare(body: CompareIn) -> JSONResponse:
        filters = body.filters.model_dump(exclude_none=True) if body.filters else None
        result = db.compare(body.bases, body.question, top_k=body.top_k, rerank=body.rerank, filters=filters)
        return JSONResponse(result.to_dict())

    @api.post("/bases/{name}/notes", status_code=201, summary="Add a note (a document of the source metis-<name>)",
              responses={404: {"model": ErrorOut}})
    def add_note(name: NameParam, body: NoteIn) -> JSONResponse:
        note_id = db.add_note(name, body.title, body.text)
        return JSONResponse({"note_id": note_id, "base": name, "source": f"metis-{name}"}, status_code=201)

    @api.get("/bases/{name}/notes", summary="The notes of a base, oldest first", responses={404: {"model": ErrorOut}})
    def list_notes(name: NameParam) -> dict[str, Any]:
        return {"notes": [n.to_dict() for n in db.notes(name)]}

    @api.delete("/bases/{name}/notes/{note_id}", summary="Delete a note", responses={404: {"model": ErrorOut}})
    def delete_note(name: NameParam, note_id: int) -> dict[str, Any]:
        db.delete_note(name, note_id)
        return {"deleted": note_id}

    @api.post("/bases/{name}/facts", status_code=201, summary="Remember a fact in a memory base (SPEC F11)",
              responses={404: {"model": ErrorOut}})
    def remember(name: NameParam, body: FactIn) -> JSONResponse:
        fact_id = db.remember(name, body.text, key=body.key, supersedes=body.supersedes, observed_at=body.observed_at)
        return JSONResponse({"fact_id": fact_id, "base": name}, status_code=201)

    @api.get("/bases/{name}/facts", summary="The facts of a memory base, in the order observed",
             responses={404: {"model": ErrorOut}})
    def list_facts(name: NameParam, holding_only: bool = False) -> dict[str, Any]:
        return {"facts": [f.to_dict() for f in db.facts(name, holding_only=holding_only)]}

    app.include_router(api)
    return app


# -- running it --------------------------------------------------------------


def serve(
    metis: Metis | None = None,
    *,
    dsn: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8080,
    tokens: str | Sequence[str] | None = None,
    source_roots: str | Sequence[str | os.PathLike] | None = None,
    log_level: str = "info",
) -> None:
    """Run the service with uvicorn until interrupted (``metis serve``).

    The bind is checked before the database is opened: without a token only a
    loopback `host` is allowed.

    Raises:
        ConfigError: `host` is not loopback and no token is configured; a bad setting.
    """
    import uvicorn

    token_list = parse_tokens(os.environ.get("METIS_API_TOKENS") if tokens is None else tokens)
    check_bind(host, token_list)
    if metis is None:
        metis = connect(dsn)
    app = create_app(metis, tokens=token_list, source_roots=source_roots)
    log.info("metis serve on %s:%d; tokens %s; source roots %s", host, port,
             "required" if token_list else "off (loopback only)",
             ":".join(str(r) for r in app.state.source_roots) or "none (indexing off)")
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level, server_header=False, proxy_headers=False)
    finally:
        metis.close()


@contextmanager
def running(app: FastAPI, host: str = "127.0.0.1", *, log_config: dict | None = None) -> Iterator[str]:
    """Run `app` with uvicorn on a free port of `host` in a thread; yield its base URL; stop it after.

    For tests and benchmarks (loopback only).
    """
    if not is_loopback(host):
        raise ConfigError(f"running() serves loopback only, not {host!r}")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, log_config=log_config, lifespan="on", server_header=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    try:
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the metis service did not start within 15 s")
            time.sleep(0.02)
        yield f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()
