"""Commands that fill a base: ``metis index``, ``metis reembed``, ``metis demo``."""

# No `from __future__ import annotations`: Typer would compile the options' annotation strings at each run
# (search's module: Typer's build 9 -> 3 ms of CPU; issue 25).

import contextlib
import os
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..errors import DatabaseUnavailable, InvalidInput
from .options import DsnOption, JsonOption, open_metis
from .render import escape, renderer
from .root import app

__all__ = ["index", "watch", "reembed", "demo", "DEMO_QUESTIONS"]


@app.command()
def index(
    ctx: typer.Context,
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
    readers: Annotated[Optional[str], typer.Option(
        "--readers", help="Groups that may read the documents of these folders, comma-separated ('' = every "
                          "caller again); kept with each source (default: keep the source's).")] = None,
    front_matter_readers: Annotated[Optional[bool], typer.Option(
        "--front-matter-readers/--no-front-matter-readers",
        help="Let a document's own `readers:` front matter narrow its source's readers (default: keep).")] = None,
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
      metis index ./hr --base docs --readers hr,legal   # only hr and legal read these (docs/security.md)
    """
    from .progress import index_with_progress, reindex_with_progress  # rich: only for commands that index

    r = renderer(ctx)
    r.choose(json=as_json)
    if all_bases and (paths or base):
        raise InvalidInput("--all reads every source of every base again: give no path and no --base")
    if not all_bases and base is None:
        raise InvalidInput("name the base: metis index FOLDER --base NAME (or --base NAME alone to read its "
                           "sources again, --all for every base)")
    if source is not None and not paths:
        raise InvalidInput("--source names the source of the paths given; with no path every source keeps its name")
    max_file_bytes = None if max_file_mb is None else max(1, round(max_file_mb * 1_000_000))
    options = {"max_file_bytes": max_file_bytes, "batch_documents": batch}
    if readers is not None or front_matter_readers is not None:
        if not paths:
            raise InvalidInput("--readers and --front-matter-readers are given to the folders indexed: name them")
        options |= {"readers": readers, "front_matter_readers": front_matter_readers}
    with open_metis(dsn) as m:
        if paths:
            known = m.base_names()
            # A typo'd --base would otherwise pass unnoticed: said before the bars (a missing path: only its error).
            if base not in known and not as_json and all(p.expanduser().exists() for p in paths):
                r.note(f"created base {base!r} with the defaults"
                       + (f" (other bases: {', '.join(known)})" if known else ""))
            with _continue_later(f"metis index {' '.join(shlex.quote(str(p)) for p in paths)} --base {shlex.quote(base)}"):
                report = index_with_progress(r, m, base, paths, source, quiet=as_json, **options)
            if as_json:
                r.json(report.to_dict())
            else:
                r.report(report)
            return
        names = m.base_names() if all_bases else [base]
        done: list[dict[str, Any]] = []
        for name in names:
            if all_bases and not m.sources(name):
                continue  # a base of notes or facts only: nothing to read again
            with _continue_later(f"metis index --base {shlex.quote(name)}"):
                for s, report in reindex_with_progress(r, m, name, quiet=as_json, **options):
                    done.append({**report.to_dict(), "source": s.name, "folder": s.root})
                    if not as_json:
                        r.line(f"source {s.name} ({s.root})")
                        r.report(report)
    if as_json:
        r.json(done)
    elif not done:
        r.out.print("no base has a folder source to index again")


@contextlib.contextmanager
def _continue_later(command: str) -> Iterator[None]:
    """Say, when the database goes away in the middle of indexing, that what was written is kept and which
    command continues: "the server closed the connection" alone (exit 5) left the user guessing."""
    try:
        yield
    except DatabaseUnavailable as exc:
        raise DatabaseUnavailable(f"{exc.message}; every batch written before is kept: run `{command}` again "
                                  "once the database is back (it skips what it already indexed)") from exc


@app.command()
def reembed(
    ctx: typer.Context,
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
    from .progress import count_bar

    r = renderer(ctx)
    r.choose(json=as_json)
    with open_metis(dsn) as m, count_bar(r, "embedding", "chunks", quiet=as_json) as bar:
        task = bar.add_task("reembed", total=None)
        report = m.reembed(
            base, embedding_model=model, embedding_url=url, embedding_dim=dim, embedding_protocol=protocol,
            query_prefix=query_prefix, on_progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    if as_json:
        r.json(report.to_dict())
    else:
        r.out.print(f"{report.base}: {report.old_model} → {report.new_model} · {report.chunks_embedded} chunks "
                    f"embedded, {report.vectors_deleted} old vectors deleted · {report.seconds:.1f} s")


DEMO_QUESTIONS = (
    "how are identifiers like PO-2231 found by keyword search?",
    "what happens when the embedding model does not answer?",
    "which kinds of files can be indexed?",
)


@app.command()
def demo(
    ctx: typer.Context,
    paths: Annotated[Optional[list[Path]], typer.Argument(help="Folders or files (default: docs/ and README.md).")] = None,
    base: Annotated[str, typer.Option("--base", "-b")] = "demo",
    top_k: Annotated[int, typer.Option("--top-k", "-k")] = 3,
    question: Annotated[Optional[list[str]], typer.Option("--question", "-q", help="Ask this (repeatable).")] = None,
    dsn: DsnOption = None,
) -> None:
    """Index documents into a base and run example searches, printing cited results.

    Example: metis demo ../handbook -q "how many vacation days"
    """
    from .progress import index_with_progress

    r = renderer(ctx)
    if not paths:
        checkout = Path(__file__).resolve().parents[2]
        paths = [p for p in (checkout / "docs", checkout / "README.md") if p.exists()]
        if not paths:
            raise typer.BadParameter("no docs/ or README.md next to the package: give a folder to index")
    # The folder the demo reads: the checkout (its docs/ and README.md), or what the paths share.
    folders = [p.resolve() if p.is_dir() else p.resolve().parent for p in paths if p.exists()]
    root = Path(os.path.commonpath(folders)) if folders else None
    with open_metis(dsn, upgrade=True) as m:  # the main job: bring the schema to head first
        if root is not None:
            _take_over_the_demo(r, m, base, root)
        report = index_with_progress(r, m, base, paths, None, quiet=False)
        r.report(report)
        for q in question or DEMO_QUESTIONS:
            r.out.print(f"\n[bold]? {escape(q)}[/]", markup=True)
            r.answer(m.search(base, q, top_k=top_k))


def _take_over_the_demo(r, m, base: str, root: Path) -> None:
    """Let this checkout's ``metis demo`` run where another checkout's ran (one METIS_HOME, two clones).

    The demo's base then holds the demo of the other checkout: its ``docs/`` folder and a file
    beside it (or this checkout's, when the demo is given other folders). Such a base is dropped
    and indexed again from here, said on stderr with whose demo it held and how to keep both. A
    base holding anything else is refused, with two commands that work.

    Raises:
        InvalidInput: `base` holds documents that are not another checkout's demo.
    """
    if base not in m.base_names():
        return
    found = m.sources(base)
    roots = {Path(s.root) for s in found}
    if roots <= {root, root / "docs"}:
        return
    others = roots - {root, root / "docs"}
    tops = {p.parent if p.name == "docs" else p for p in others}
    demo_layout = len(tops) == 1 and all(p in (next(iter(tops)), next(iter(tops)) / "docs") for p in others) and all(
        s.whole_folder == (Path(s.root).name == "docs") for s in found if Path(s.root) in others)
    if not demo_layout or m.notes(base):
        raise InvalidInput(f"base {base!r} holds other documents than this demo's ({', '.join(sorted(map(str, others)))}):"
                           f" run the demo into another base (metis demo --base {base}-2), or drop it first"
                           f" (metis base drop {base} --yes)")
    top = next(iter(tops))
    whose = f"this checkout's demo ({top})" if top == Path(__file__).resolve().parents[2] else f"the demo of {top}"
    r.note(f"base {base!r} held {whose}: dropped, indexing it again from {root}"
           f" (metis demo PATH --base NAME keeps both)")
    m.drop_base(base)


@app.command()
def watch(
    ctx: typer.Context,
    paths: Annotated[Optional[list[Path]], typer.Argument(
        help="Folders to follow (one not indexed yet is indexed into --base first). None: every folder source "
             "of --base, or of every base.")] = None,
    base: Annotated[Optional[str], typer.Option("--base", "-b", help="The base (default: every base).")] = None,
    debounce_ms: Annotated[int, typer.Option(
        "--debounce-ms", min=50, max=600_000,
        help="A burst of changes is indexed once no change came for 300 ms, or after this long at most "
             "while changes keep coming.")] = 30_000,  # metis_pg.watch.BURST_CAP_MS (not imported: start-up)
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Follow folder sources and index what changes (words first, then vectors) until Ctrl-C or SIGTERM.

    Each burst of changes (a `git checkout`) is one indexing run per folder; a file that fails is
    skipped with its reason and watching goes on, also while the database or the model restarts.
    Exit 130 on Ctrl-C, 0 on SIGTERM.

    \b
    Examples:
      metis watch ./handbook --base docs
      metis watch --base docs          # every folder source of docs
    """
    import json as json_module

    from ..watch import TERMINATED, Terminated, Watcher, resolve_targets, stop_on_sigterm

    r = renderer(ctx)
    r.choose(json=as_json)

    said: dict[tuple[str, str], str] = {}  # the error last printed for each folder: said once, not every retry

    def on_report(target, report, error) -> None:
        key = (target.base, target.source)
        if as_json:  # one JSON object per run, as it happens
            print(json_module.dumps({"base": target.base, "source": target.source, "folder": str(target.root),
                                     "report": report.to_dict() if report else None, "error": error}), flush=True)
        elif error:
            if said.get(key) != error:
                said[key] = error
                r.line(f"{target.base}:{target.source}: not indexed: {error}")
        elif (said.pop(key, None) is not None  # the first run after an error: say it indexes again
              or report.read or report.deleted or report.failed or report.warnings or report.chunks_embedded):
            r.report(report)

    stop_on_sigterm()
    with open_metis(dsn) as m:
        watcher = Watcher(m, resolve_targets(m, base, paths or []), debounce_ms=debounce_ms, on_report=on_report)
        if not as_json:
            for t in watcher.targets:
                r.dim(f"watching {t.root} ({t.base}:{t.source}); Ctrl-C to stop")
        try:
            watcher.run()
        except (Terminated, KeyboardInterrupt):
            if not TERMINATED.is_set():
                raise  # Ctrl-C: exit 130
            if not as_json:
                r.dim("stopped (SIGTERM)")
            raise typer.Exit(0) from None
