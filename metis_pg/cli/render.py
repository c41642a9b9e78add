"""What ``metis`` prints: one :class:`Renderer` per run, for people (text) and machines (json, jsonl, csv, md, files).

The renderer holds the run's output format (chosen once by a command's flags) and its two consoles, so an
error raised anywhere in the command is printed in that format by :func:`metis_pg.cli.root.main`. The
machine formats of search results and document lists are :mod:`metis_pg.formats` (the MCP server uses them
too); this module prints them, and everything people read.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from typing import TYPE_CHECKING, Any

import typer

from ..config import BaseSpec
from ..errors import InvalidInput, MetisError
from ..formats import result_label

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from ..compare import CompareResult
    from ..reports import IndexReport
    from ..results import SearchResponse

__all__ = ["Renderer", "ClosedPipe", "renderer", "visible", "marked_snippet", "SPEC"]

#: A base's defaults live in BaseSpec only; options and notes show them.
SPEC = BaseSpec()

# C0 and C1 control characters (ESC, newline, ...) in a file name or a title would move the
# cursor or recolour the terminal: shown as \xNN, as undecodable bytes in names are.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """Return `text` with its control characters written as ``\\xNN``, for one line of a terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def marked_snippet(snippet: str, marks: tuple[tuple[int, int], ...], *, indent: str = "") -> Any:
    """Return `snippet` as a rich Text, its `marks` (the words that weigh, ``Citation.marks``) in bold:
    bold on a terminal, plain text elsewhere (a pipe, a file)."""
    from rich.text import Text

    text, at = Text(indent), 0
    for start, end in marks:
        text.append(visible(snippet[at:start]))
        text.append(visible(snippet[start:end]), style="bold")
        at = end
    text.append(visible(snippet[at:]))
    return text


class ClosedPipe(Exception):
    """The reader of stdout went away (``metis ls | head -1``): the run ends as ``cat``'s does, exit 0, quiet.

    Not an OSError: click turns a broken pipe into exit 1, which README reserves for a bug.
    """


def escape(text: str) -> str:
    """Return `text` with rich's markup escaped (rich.markup.escape, imported when first printed)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


@functools.cache
def _console_class() -> type[Console]:
    """Return a rich console class that raises :class:`ClosedPipe` on a closed pipe (rich's own answer is
    exit 1); rich is imported here, on the first print for people: the machine formats never import it."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise ClosedPipe

    return _Console


class Renderer:
    """The output of one ``metis`` run: its format and its consoles (stdout `out`, stderr `err`).

    Text from documents and errors may hold brackets ([link](url), [Errno 111]): never read as markup,
    never wrapped (an error is one line). A console given None writes to the ``sys.stdout`` /
    ``sys.stderr`` of the moment it prints (a test's capture, CliRunner's). The consoles are made at their
    first use: a run printing only a machine format (``--json``: :meth:`write`) never imports rich, ~20 ms of
    ``metis search``'s start-up (issue 25).
    """

    def __init__(self, out: Console | None = None, err: Console | None = None) -> None:
        self._out = out
        self._err = err
        self.format = "text"

    @property
    def out(self) -> Console:
        """The rich console of stdout (made at first use)."""
        if self._out is None:
            self._out = _console_class()(highlight=False, soft_wrap=True, markup=False)
        return self._out

    @property
    def err(self) -> Console:
        """The rich console of stderr (made at first use)."""
        if self._err is None:
            self._err = _console_class()(stderr=True, highlight=False, soft_wrap=True, markup=False)
        return self._err

    # -- the format ------------------------------------------------------------

    def choose(self, **flags: bool) -> str:
        """Set and return the output format the flags ask for (``text`` when none), e.g. ``choose(json=True)``.

        Raises:
            InvalidInput: more than one format flag.
        """
        chosen = [name for name, on in flags.items() if on]
        self.format = chosen[0] if chosen else "text"
        if len(chosen) > 1:
            raise InvalidInput("choose one output format: " + " or ".join(f"--{c}" for c in chosen))
        return self.format

    @property
    def machine(self) -> bool:
        """Whether errors are JSON (``--json``, ``--jsonl``) rather than a line on stderr."""
        return self.format in ("json", "jsonl")

    # -- machines --------------------------------------------------------------

    def write(self, text: str) -> None:
        """Write `text` to stdout as it is (a machine format), flushed.

        Raises:
            ClosedPipe: stdout's reader went away.
        """
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            raise ClosedPipe from None

    def json(self, data: Any, *, one_line: bool = False) -> None:
        """Print `data` as JSON on stdout (indented unless `one_line`)."""
        self.write(json.dumps(data, ensure_ascii=False, indent=None if one_line else 2) + "\n")

    def error(self, exc: MetisError) -> None:
        """Print `exc` in the run's format: ``{"error": {...}}`` on stdout, or ``error [CODE]: message`` on stderr."""
        if self.machine:
            self.json(exc.to_dict(), one_line=self.format == "jsonl")
        else:
            self.err.print(f"error [{exc.code}]: {exc.message}", markup=False)

    # -- people ------------------------------------------------------------------

    def line(self, text: str) -> None:
        """Print one line of plain text on stdout, control characters made visible."""
        self.out.print(visible(text))

    def note(self, text: str) -> None:
        """Print one line on stderr (a side remark; stdout stays the command's output)."""
        self.err.print(visible(text))

    def dim(self, text: str) -> None:
        """Print one faint line on stdout (`text` is escaped)."""
        self.out.print(f"[dim]{escape(text)}[/]", markup=True)

    def report(self, report: IndexReport) -> None:
        """Print an index report: counts, then each skipped file and each warning."""
        self.out.print(
            f"{report.base}: {report.read} read ({report.new} new, {report.changed} changed), "
            f"{report.unchanged} unchanged, {report.deleted} deleted, {len(report.failed)} failed · "
            f"{report.chunks} chunks, {report.chunks_embedded} embedded"
            + (f" ({report.vectors_reused} reused: same text)" if report.vectors_reused else "")
            + f" · {report.status} · {report.seconds:.1f} s"
        )
        for f in report.failed:
            self.line(f"  skipped {f.path}: {f.reason}")
        for w in report.warnings:
            self.line(f"  warning: {w}")

    def warnings(self, warnings) -> None:
        """Print each warning of an answer on stderr: stdout holds only the results, so that
        ``metis search B Q | head -1`` is the first result and ``> file`` keeps the results alone."""
        for w in warnings:
            self.err.print(f"[yellow]warning:[/] {escape(w.message)}", markup=True)

    def answer(self, answer: SearchResponse) -> None:
        """Print an answer for people: rank, document:line (or page), headings, snippet, scores."""
        self.warnings(answer.warnings)
        if not answer.results:
            self.out.print("no results")
        for rank, r in enumerate(answer.results, start=1):
            c = r.citation
            where, heading = result_label(answer, r)
            more = "" if r.passages is None else f" ({r.passages} passage{'' if r.passages == 1 else 's'})"
            self.line(f"{rank}. {where}{c.location()} · {heading}{more}")
            self.out.print(marked_snippet(c.snippet, c.marks, indent="   "))
            if c.tags or c.author:  # what the document says of itself (its date alone may be the file's mtime)
                about = " · ".join(part for part in (
                    c.date.isoformat()[:10] if c.date else "", f"by {c.author}" if c.author else "",
                    " ".join(f"#{t}" for t in c.tags)) if part)
                self.out.print(f"   {visible(about)}")
            holds = "" if r.holds is None else (" · holds" if r.holds else " · replaced")
            self.out.print(f"   [dim]{r.scores.line()}{holds}[/]", markup=True)
        t = answer.took
        self.out.print(
            f"[dim]{answer.mode}{fusion_note(answer.fusion)}{' · reranked' if answer.reranked else ''}"
            f"{' · per document' if answer.per_document else ''} · "
            f"took {t.total:.0f} ms (embed {t.embed:.0f}, dense {t.dense:.0f}, keyword {t.keyword:.0f}, "
            f"fuse {t.fuse:.0f}, rerank {t.rerank:.0f})[/]",
            markup=True,
        )

    def comparison(self, result: CompareResult) -> None:
        """Print a comparison (SPEC F15): one row per passage, its rank in each mode, and why."""
        from rich.table import Table

        self.warnings(result.warnings)
        if not result.passages:
            self.out.print("no results in any mode")
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
                          escape(visible(f"{where}{c.location()} · {heading}")), escape(p.why))
        self.out.print(table)
        counts = result.counts()
        self.out.print(
            f"[dim]hybrid {counts['hybrid']} · dense {counts['dense']} · keyword {counts['keyword']} passages"
            f"{' · reranked' if result.reranked else ''} · took {result.took['total']:.0f} ms[/]",
            markup=True,
        )

    def evaluation(self, report) -> None:
        """Print an evaluation: one row per mode, then per query type."""
        from rich.table import Table

        self.out.print(f"{report.eval_set} on base {report.base}: {report.queries} questions "
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
        self.out.print(table, width=max(self.out.width, 100))
        self.out.print(f"[dim]R@k = Recall@k · zero = share of questions with no result · "
                       f"{report.top_k} passages per search, each document counted once at its first rank · "
                       f"{report.seconds:.0f} s[/]", markup=True)

    def documents(self, found, prefix: str | None) -> None:
        """Print a document list for people: path, kind, chunks, when indexed, source, then its date,
        author and tags when it has tags or an author (``--json``: every field, mtime dates too)."""
        if not found:
            self.out.print("no documents" + (f" starting with {prefix!r}" if prefix else ""))
            return
        width = max(len(visible(d.document)) for d in found)
        for d in found:
            about = "  ".join(part for part in (  # its own metadata (a date alone may be the file's mtime)
                d.date[:10] if d.date else "", f"by {visible(d.author)}" if d.author else "",
                " ".join(f"#{visible(t)}" for t in d.tags)) if part) if d.tags or d.author else ""
            self.out.print(f"{visible(d.document):<{width}}  {d.kind:<4}  {d.chunks:>5} chunks  "
                           f"{d.indexed_at[:19].replace('T', ' ')}  {visible(d.source)}"
                           + (f"  {about}" if about else ""), highlight=False, markup=False)

    def document_texts(self, shown) -> None:
        """Print documents as `metis get` shows them: (document, text cut, full size in bytes) triples."""
        for i, (d, cut, size) in enumerate(shown):
            if i:
                self.out.print("")
            first = d.chunks[0] if d.chunks else None
            heading = (" > ".join(first.headings) if first is not None and first.headings and not d.whole
                       else d.info.title)
            part = f"{len(d.chunks)} chunks" if d.whole else f"chunk {first.ordinal + 1} of {d.info.chunks}" if len(
                d.chunks) == 1 else f"{len(d.chunks)} of {d.info.chunks} chunks"
            self.line(f"{d.base} · {d.location()} · {heading}")
            self.line(f"source {d.info.source} · {d.info.kind} · {part} · indexed {d.info.indexed_at[:19]}")
            self.out.print("")
            self.out.print(cut)
            if len(cut) < len(d.text):
                self.out.print(f"… cut at {len(cut.encode('utf-8'))} of {size} bytes (--max-bytes)")


def status_line(i) -> str:
    """Return one line of a base's status (``metis status``, ``metis base list``)."""
    missing = f", {i.chunks_without_vector} without vector" if i.chunks_without_vector else ""
    why = getattr(i, "without_vector_by_reason", None) or {}
    reasons = [f"{why[k]} {words}" for k, words in (("refused", "refused by the embedding model"),
                                                    ("model_unavailable", "model did not answer"))
               if why.get(k)]
    if reasons and why.get("not_embedded_yet"):
        reasons.append(f"{why['not_embedded_yet']} not embedded yet")
    missing += f" ({', '.join(reasons)})" if reasons else ""
    missing += f", {i.chunks_cut} embedded from a cut text" if getattr(i, "chunks_cut", 0) else ""
    missing += f", {i.vectors_reused} sharing a vector (same text)" if i.vectors_reused else ""
    model = i.spec.get("embedding_model")
    interrupted = " (last indexing interrupted: `metis index` finishes it)" if i.interrupted else ""
    watched = (f" · watched, caught up {i.caught_up_at or 'not yet'}" if i.watched
               else f" · last caught up by a watch {i.caught_up_at}" if i.caught_up_at else "")
    return (f"{i.name}: {i.status}{interrupted} · {i.kind} · {i.documents} documents, {i.chunks} chunks{missing} · "
            f"model {model} · last indexed {i.last_indexed_at or ('not finished yet' if i.chunks else 'never')}{watched}")


def fusion_note(fusion: dict[str, Any]) -> str:
    """Return `` · rrf · weights 1.5:1 · rrf_k 20`` (or `` · convex tmm alpha 0.6``) for the fusion parts
    that are not the defaults, and the routing features that fired; ``""`` else."""
    if "per_base" in fusion:
        return " · fusion per base"
    note = ""
    function = fusion.get("fusion", SPEC.fusion)
    if function == "convex":
        if (function, fusion.get("normalization"), fusion.get("alpha")) != (
                SPEC.fusion, SPEC.normalization, SPEC.alpha):
            note += f" · convex {fusion.get('normalization')} alpha {fusion.get('alpha'):g}"
    else:
        if function != SPEC.fusion:
            note += f" · {function}"
        if (fusion.get("dense_weight", SPEC.dense_weight), fusion.get("keyword_weight", SPEC.keyword_weight)) != (
                SPEC.dense_weight, SPEC.keyword_weight):
            note += f" · weights {fusion['dense_weight']:g}:{fusion['keyword_weight']:g}"
        if fusion.get("rrf_k", SPEC.rrf_k) != SPEC.rrf_k:
            note += f" · rrf_k {fusion['rrf_k']}"
    if fusion.get("collapse_copies", SPEC.collapse_copies) != SPEC.collapse_copies:
        note += " · copies collapsed" if fusion["collapse_copies"] else " · copies kept"
    route = fusion.get("route") or {}
    if route.get("features"):
        note += f" · routed ({', '.join(route['features'])}: dense share {route['dense_share']:.2f})"
    return note


def renderer(ctx: typer.Context) -> Renderer:
    """Return the running command's renderer: the one :func:`~metis_pg.cli.root.main` passed as the context's
    object, or a new one attached to `ctx` (a command invoked by Typer's CliRunner)."""
    return ctx.ensure_object(Renderer)
