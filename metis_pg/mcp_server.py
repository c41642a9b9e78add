"""An MCP server (Model Context Protocol) over a metis database, for coding agents: ``metis mcp``.

Built with the official Python SDK (PyPI ``mcp``, :class:`mcp.server.mcpserver.MCPServer`); served
over stdio by ``metis mcp`` (the agent starts it), and over streamable HTTP at ``/mcp`` by
``metis serve`` (behind the service's bearer tokens).

Tools (each answers JSON; an error is a tool error ``CODE: message``, the codes of
:mod:`metis_pg.errors`):

==============  =================================================================================
``search``      question, bases (default: every base), mode, top_k, prefix, kinds, sources,
                min_score, per_document, snippet_only, max_bytes → cited passages best first:
                citation ``document:line``, headings, score and every step's scores, the
                passage's text (or its snippet), chunk_id; and warnings
``get``         base + citation (``document``, ``document:LINE``, ``document p.N``) or chunk_id
                → the document, or the chunk cited there, read back from its chunks
``list_bases``  every base: kind, status, documents, chunks, last indexed
``status``      one base (or all): status, counts, chunks without a vector, interrupted
                indexing, last indexed, embedding model (not the whole spec)
==============  =================================================================================

Resources: every document is ``metis://BASE/PATH`` (its path percent-encoded), text read back
from its chunks, at most :data:`MAX_RESOURCE_BYTES` of it (a last line says where it was cut);
``resources/list`` lists at most :data:`MAX_LISTED_RESOURCES` of them.

Who reads (issue 21): over HTTP every tool, resource and listing reads on behalf of the groups of
the request's bearer token (``principals_of``, set by the service's gate); over stdio on behalf of
the groups given to ``metis mcp --as`` (None: the operator, every document).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal
from urllib.parse import quote

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError

from . import __version__
from .api import Metis
from .documents import cut_utf8
from .errors import InvalidInput, MetisError
from .formats import cut_below, text_marks

__all__ = ["build_server", "serve_stdio", "add_http_routes", "MAX_LISTED_RESOURCES", "MAX_RESOURCE_BYTES",
           "document_uri"]

#: Documents ``resources/list`` names at most (the first by base and path); each is readable anyway.
MAX_LISTED_RESOURCES = 2000
#: Bytes of text ``get`` returns per document unless asked otherwise (an agent's context is finite).
DEFAULT_GET_BYTES = 20_000
#: Bytes of text a resource read returns at most (a read takes no arguments; a 28.7 MB text file was sent
#: whole, 29 MB): the rest is cut, and a last line says so and how to read on with ``get``.
MAX_RESOURCE_BYTES = 200_000

INSTRUCTIONS = """\
metis searches documents indexed in PostgreSQL: by meaning (embeddings) and by words (BM25), fused.
Call `search` with a question; each result has a citation `document:line` in its base. Call `get`
with that base and citation to read the passage (or the document without `:line`). `list_bases`
names the bases and what they hold."""


def document_uri(base: str, document: str) -> str:
    """Return the resource URI of a document: ``metis://BASE/PATH``, both percent-encoded (``/`` kept in PATH)."""
    return f"metis://{quote(base, safe='')}/{quote(document, safe='/')}"


#: The principals of an MCP request: from its HTTP request (the service's gate), else fixed (stdio).
PrincipalsOf = Callable[[Any], "tuple[str, ...] | None"]


class _MetisMCP(MCPServer):
    """MCPServer whose ``resources/list`` names the documents in the database at the time of asking
    (those the caller may read)."""

    def __init__(self, metis: Metis, who: PrincipalsOf, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.metis = metis
        self.who = who

    async def _handle_list_resources(self, ctx: Any, params: Any) -> Any:
        from mcp_types import ListResourcesResult

        return ListResourcesResult(resources=await self.list_resources(self.who(getattr(ctx, "request", None))))

    async def list_resources(self, principals: Sequence[str] | None = None) -> list[Any]:  # type: ignore[override]
        import anyio
        from mcp_types import Resource

        def documents() -> list[Resource]:
            found: list[Resource] = []
            for base in self.metis.list_bases():
                for d in self.metis.documents(base.name, principals=principals):
                    if len(found) >= MAX_LISTED_RESOURCES:
                        return found
                    found.append(Resource(
                        uri=document_uri(base.name, d.document), name=f"{base.name}/{d.document}", title=d.title,
                        description=f"{d.kind}, {d.chunks} chunks, source {d.source}, indexed {d.indexed_at[:19]}",
                        mime_type="text/markdown" if d.kind == "md" else "text/plain",
                    ))
            return found

        return [*await anyio.to_thread.run_sync(documents), *await super().list_resources()]


def _capped(text: str, path: str, max_bytes: int) -> str:
    """Return `text` whole, or its first `max_bytes` UTF-8 bytes (on a character boundary) and a last line saying
    it was cut, how much of it is here, and how to read on (the ``get`` tool: a passage by its line, more bytes)."""
    size = len(text.encode("utf-8"))
    if size <= max_bytes:
        return text
    kept = cut_utf8(text, max_bytes)
    return (f"{kept}\n\n[cut: the first {len(kept.encode('utf-8'))} of {size} bytes of {path}. Read on with the get "
            f"tool: citation '{path}:LINE' (as search cites it) gives the passage at a line, max_bytes more of the "
            f"document]")


def _tool_error(exc: MetisError) -> ToolError:
    return ToolError(f"{exc.code}: {exc.message}")


def _result(rank: int, r: Any, *, snippet_only: bool = False) -> dict[str, Any]:
    """A search result as the tool answers it: the whole chunk's `text`, or (`snippet_only`) its `snippet`, with
    `marks`: the spans of that text holding the question's words that weigh in the base (``[start, end]``,
    characters), as the CLI, HTTP and the console mark them (:func:`metis_pg.formats.text_marks`)."""
    data = r.to_dict()
    citation = data.pop("citation")
    if snippet_only:
        data.pop("text")
    else:
        citation["marks"] = [[a, b] for a, b in text_marks(r)]
    return {"rank": rank, "citation": r.citation.location(),
            **{k: v for k, v in citation.items() if k != "snippet" or snippet_only}, **data}


def _within(results: list[dict[str, Any]], max_bytes: int | None) -> list[dict[str, Any]]:
    """Cut the results' texts (or snippets), best first, so that together they hold at most `max_bytes`
    UTF-8 bytes; a result cut says ``truncated: true`` (its citation and scores are kept)."""
    if max_bytes is None:
        return results
    left = max_bytes
    for r in results:
        key = "text" if "text" in r else "snippet"
        kept = cut_utf8(r[key], left)
        left -= len(kept.encode("utf-8"))
        if len(kept) < len(r[key]):
            r[key], r["truncated"] = kept, True
            r["marks"] = [m for m in r.get("marks", []) if m[1] <= len(kept)]
    return results


#: What ``status`` tells an agent of a base (not its spec: models' URLs, chunk sizes, weights).
STATUS_FIELDS = ("name", "kind", "status", "interrupted", "documents", "chunks", "chunks_without_vector",
                 "without_vector_by_reason", "chunks_cut", "last_indexed_at")


def _status(info: Any) -> dict[str, Any]:
    data = info.to_dict()
    return {k: data[k] for k in STATUS_FIELDS if k in data} | {"embedding_model": info.spec.get("embedding_model")}


def build_server(metis: Metis, *, principals_of: PrincipalsOf | None = None,
                 principals: Sequence[str] | None = None, max_resource_bytes: int = MAX_RESOURCE_BYTES) -> MCPServer:
    """Return the MCP server over `metis` (tools search, get, list_bases, status; a resource per document).

    Args:
        principals_of: the groups a call reads on behalf of, from its HTTP request (the service);
            None: `principals` for every call (stdio; None = the operator, every document).
        max_resource_bytes: UTF-8 bytes of a document a resource read returns at most.
    """
    fixed = None if principals is None else tuple(principals)

    def who(request: Any) -> tuple[str, ...] | None:
        return principals_of(request) if principals_of is not None else fixed

    def caller(ctx: Context) -> tuple[str, ...] | None:
        return who(getattr(ctx.request_context, "request", None))

    server = _MetisMCP(metis, who, name="metis", title="metis_pg", version=__version__, instructions=INSTRUCTIONS,
                       log_level="WARNING")

    @server.tool(description="Search documents by meaning and words; return cited passages with their scores, "
                             "best first. Each result's `citation` (document:line) and `base` read it back with `get`.")
    def search(
        question: str,
        bases: list[str] | str | None = None,
        mode: Literal["hybrid", "dense", "keyword"] = "hybrid",
        top_k: int = 10,
        prefix: str | None = None,
        kinds: list[str] | None = None,
        sources: list[str] | None = None,
        min_score: float | None = None,
        per_document: bool = False,
        snippet_only: bool = False,
        max_bytes: int | None = None,
        tags: list[str] | None = None,
        tags_all: list[str] | None = None,
        exclude_tags: list[str] | None = None,
        authors: list[str] | None = None,
        categories: list[str] | None = None,
        since: str | None = None,
        until: str | None = None,
        exclude_prefixes: list[str] | None = None,
        meta: dict[str, str | int | float | bool] | None = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        """question: "a quoted phrase" keeps only passages holding it, -word drops passages holding the word.
        bases: names, or one name (default every base); prefix: keep paths starting with it; kinds: md, txt, html, pdf,
        docx; sources: source names; min_score: leave out results scored below it (the fused score in hybrid,
        cosine in dense, BM25 in keyword, the reranker's when reranked); per_document: each document once, at
        its best passage, with how many of its passages matched; snippet_only: each result's snippet (at most 240
        characters around the question's words) instead of its whole passage; max_bytes: the results' texts
        (or snippets) together at most this many UTF-8 bytes, cut best first (`truncated` says which).
        Metadata: tags (any of them), tags_all, exclude_tags, authors, categories, since/until (ISO dates: the
        document's date, else its file's modification time), exclude_prefixes (paths), meta (front matter /
        properties key: value, all must hold)."""
        try:
            if max_bytes is not None and max_bytes < 1:
                raise InvalidInput(f"max_bytes must be a positive number of bytes, not {max_bytes}")
            names = [bases] if isinstance(bases, str) else bases or metis.base_names(for_reading=True)
            filters = {k: v for k, v in (
                ("path_prefix", prefix), ("kinds", kinds), ("sources", sources), ("tags_any", tags),
                ("tags_all", tags_all), ("exclude_tags", exclude_tags), ("authors", authors),
                ("categories", categories), ("since", since), ("until", until),
                ("exclude_prefixes", exclude_prefixes), ("meta", meta)) if v}
            answer, dropped = cut_below(metis.search(names, question, mode=mode, top_k=top_k, filters=filters,
                                                     per_document=per_document, principals=caller(ctx)),
                                        min_score)
        except MetisError as exc:
            raise _tool_error(exc) from None
        return {
            "mode": answer.mode, "reranked": answer.reranked, "bases": list(answer.bases), "fusion": answer.fusion,
            "results": _within([_result(i, r, snippet_only=snippet_only)
                                for i, r in enumerate(answer.results, start=1)], max_bytes),
            "warnings": [w.to_dict() for w in answer.warnings],
            "left_out_below_min_score": dropped,
        }

    @server.tool(description="Read a document of a base, or the chunk a search cited: citation `document`, "
                             "`document:LINE` or `document p.N`, or a search result's chunk_id.")
    def get(base: str, citation: str | None = None, chunk_id: int | None = None,
            max_bytes: int = DEFAULT_GET_BYTES, ctx: Context | None = None) -> dict[str, Any]:
        """max_bytes: text returned at most (UTF-8 bytes); `truncated` says when it was cut."""
        try:
            if chunk_id is not None:
                found = [metis.get_chunk(base, chunk_id, principals=caller(ctx))]
            elif citation:
                found = metis.get(base, citation, principals=caller(ctx))
            else:
                raise ToolError("INVALID_REQUEST: give a citation (document or document:line) or a chunk_id")
        except MetisError as exc:
            raise _tool_error(exc) from None
        documents = []
        for d in found:
            data = d.to_dict()
            data["truncated"] = len(data["text"].encode("utf-8")) > max_bytes
            data["text"] = cut_utf8(data["text"], max_bytes)
            data.pop("chunks")
            data["chunk_ids"] = [c.chunk_id for c in d.chunks]
            documents.append(data)
        return {"documents": documents}

    @server.tool(description="List every base: kind, status, documents, chunks, when last indexed.")
    def list_bases(ctx: Context | None = None) -> dict[str, Any]:
        try:
            infos = metis.list_bases(principals=caller(ctx))
        except MetisError as exc:
            raise _tool_error(exc) from None
        return {"bases": [{k: v for k, v in i.to_dict().items() if k != "spec"}
                          | {"embedding_model": i.spec.get("embedding_model")} for i in infos]}

    @server.tool(description="Status of one base (or every base): ready, indexing or waiting; chunks without a "
                             "vector (found by words only until embedded); whether the last indexing was interrupted.")
    def status(base: str | None = None, ctx: Context | None = None) -> dict[str, Any]:
        try:
            principals = caller(ctx)
            infos = [metis.base(base, principals=principals)] if base else metis.list_bases(principals=principals)
        except MetisError as exc:
            raise _tool_error(exc) from None
        return {"bases": [_status(i) for i in infos]}

    @server.resource("metis://{base}/{+path}", name="document", description="A document of a base, read back "
                     "from its chunks (metis://BASE/PATH).", mime_type="text/plain")
    def document(base: str, path: str, ctx: Context | None = None) -> str:
        try:
            found = metis.get(base, path, principals=caller(ctx))
        except MetisError as exc:
            raise ResourceError(f"{exc.code}: {exc.message}") from None
        return _capped("\n\n".join(d.text for d in found), path, max_resource_bytes)

    return server


def serve_stdio(dsn: str | None = None, *, principals: Sequence[str] | None = None) -> None:
    """Serve MCP over stdin/stdout until the client closes them (``metis mcp``), on behalf of
    `principals` (None: the operator, every document).

    Raises:
        DatabaseUnavailable, SchemaOutOfDate: as :func:`metis_pg.connect`, before serving.
    """
    from .api import connect

    with connect(dsn) as metis:
        build_server(metis, principals=principals).run("stdio")


def add_http_routes(app: Any, metis: Metis, *, loopback_only: bool, principals_of: PrincipalsOf | None = None) -> Any:
    """Add the MCP endpoint ``/mcp`` (streamable HTTP, stateless, JSON answers) to the service's `app`.

    Return the MCP server; the app's lifespan must run ``server.session_manager.run()``.
    The service's gate asks the same bearer tokens at ``/mcp`` as on every route. With no token
    the service binds loopback only (`loopback_only`): the SDK's DNS-rebinding check then also
    accepts only loopback ``Host`` and ``Origin`` headers. `principals_of`: the groups a request
    reads on behalf of (:func:`metis_pg.service.app.principals_of`); None = the operator.
    """
    from mcp.server.transport_security import TransportSecuritySettings

    server = build_server(metis, principals_of=principals_of)
    security = None if loopback_only else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    starlette = server.streamable_http_app(streamable_http_path="/mcp", stateless_http=True, json_response=True,
                                           transport_security=security)
    app.router.routes.extend(starlette.routes)
    return server
