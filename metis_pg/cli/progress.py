"""Progress on stderr while a base is indexed: "indexing" (documents), then "embedding" (chunks).

On a terminal, two rich bars; otherwise (stderr piped to a file, a CI log) plain lines: one when the
documents are read, then one when embedding starts, at most every :data:`LINE_INTERVAL_S` seconds
after, and one when it is done, so a long run is never silent.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

if TYPE_CHECKING:  # pragma: no cover
    from ..api import Metis
    from ..reports import IndexReport
    from .render import Renderer

__all__ = ["index_with_progress", "reindex_with_progress", "count_bar", "TimeLeftColumn", "LINE_INTERVAL_S"]

#: Seconds between two plain progress lines of the embedding phase when stderr is not a terminal.
LINE_INTERVAL_S = 30.0


class TimeLeftColumn(ProgressColumn):
    """``left 0:01:13``: the time left at the mean rate since the task started, from its first step on.

    Rich's TimeRemainingColumn estimates from the steps of the last 30 s and needs two of them: with
    a batch of vectors every 40 s on a busy machine it showed ``-:--:--`` to the end.
    """

    def render(self, task: Task) -> Text:
        if task.finished or not task.completed or not task.total or task.elapsed is None:
            return Text("left -:--:--", style="progress.remaining")
        left_s = int(task.elapsed * (task.total - task.completed) / task.completed)
        minutes, seconds = divmod(left_s, 60)
        hours, minutes = divmod(minutes, 60)
        return Text(f"left {hours}:{minutes:02d}:{seconds:02d}", style="progress.remaining")


def _bars(r: Renderer, quiet: bool) -> Progress:
    """Rich's own columns, the bar taking what the terminal leaves (80 columns: about 20 cells)."""
    return Progress(
        TextColumn("{task.description}"), BarColumn(bar_width=None), MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"), TimeElapsedColumn(), TimeLeftColumn(),
        console=r.err, disable=quiet or not r.err.is_terminal, transient=True, expand=True,
    )


def count_bar(r: Renderer, label: str | None, unit: str = "", *, quiet: bool) -> Progress:
    """Return a plain bar on stderr: `label` (or each task's description), done/total `unit`, elapsed."""
    columns = [TextColumn(label if label is not None else "{task.description}"), BarColumn(), MofNCompleteColumn()]
    if unit:
        columns.append(TextColumn(unit))
    return Progress(*columns, TimeElapsedColumn(), console=r.err, disable=quiet, transient=True)


def _lines_to(r: Renderer, quiet: bool) -> Renderer | None:
    """`r` when progress goes out as plain lines (not quiet, stderr not a terminal), else None."""
    return None if quiet or r.err.is_terminal else r


def _rate(done: int, started: float) -> str:
    return f"{done / max(time.perf_counter() - started, 1e-6):.1f} chunks/s"


def _callbacks(bar: Progress, r: Renderer | None = None) -> dict[str, Any]:
    """The two callbacks of :meth:`Metis.index`: an "indexing" bar (documents), then "embedding" (chunks).

    With `r` given, the bars are off (stderr is not a terminal): plain lines on ``r.err`` instead, as
    ``indexing 18/18 documents · 489 chunks`` and ``embedding 120/489 chunks · 0.6 chunks/s``.
    """
    task = bar.add_task("indexing", total=None, detail="documents")
    embedding: dict[str, Any] = {}
    said: dict[str, Any] = {"read": False, "at": 0.0}

    def progress(done: int, total: int, chunks: int) -> None:
        bar.update(task, completed=done, total=total, detail=f"documents · {chunks} chunks")
        if r is not None and done >= total and not said["read"]:
            said["read"] = True
            r.err.print(f"indexing {done}/{total} documents · {chunks} chunks", highlight=False)

    def embed_progress(done: int, total: int) -> None:
        if not embedding:
            embedding["task"] = bar.add_task("embedding", total=total, detail="chunks")
            embedding["started"] = time.perf_counter()
        bar.update(embedding["task"], completed=done, total=total,
                   detail=f"chunks · {_rate(done, embedding['started'])}")  # the chunks/s README quotes
        now = time.perf_counter()
        first, last = not said["at"], done >= total
        if r is not None and (first or last or now - said["at"] >= LINE_INTERVAL_S) and said.get("done") != total:
            said["at"] = now
            if last:
                said["done"] = total
            r.err.print(f"embedding {done}/{total} chunks · {_rate(done, embedding['started'])}", highlight=False)

    return {"on_progress": progress, "on_embed_progress": embed_progress}


def index_with_progress(r: Renderer, m: Metis, base: str, paths: list[Path], source: str | None, *, quiet: bool,
                        max_file_bytes: int | None = None, batch_documents: int = 100,
                        **access: Any) -> IndexReport:
    """Index `paths` into `base` with two bars on stderr: "indexing" (documents, words phase), then "embedding";
    `access`: ``readers``, ``front_matter_readers`` of :meth:`metis_pg.Metis.index`."""
    with _bars(r, quiet) as bar:
        return m.index(base, *paths, source=source, max_file_bytes=max_file_bytes,
                       batch_documents=batch_documents, **access, **_callbacks(bar, _lines_to(r, quiet)))


def reindex_with_progress(r: Renderer, m: Metis, base: str, *, quiet: bool,
                          **options: Any) -> list[tuple[Any, IndexReport]]:
    """Index every folder source of `base` again, each with its own bars; return (source, report) pairs."""
    pairs = []
    found = m.sources(base)
    if not found:
        m.reindex(base)  # raises: the base has no folder source
    for s in found:
        with _bars(r, quiet) as bar:
            reports = m.reindex(base, only=[s.name], **options, **_callbacks(bar, _lines_to(r, quiet)))
        pairs.append((s, reports[0]))
    return pairs
