"""Progress bars on stderr while a base is indexed: "indexing" (documents), then "embedding" (chunks)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..api import Metis
    from ..results import IndexReport
    from .render import Renderer

__all__ = ["index_with_progress", "reindex_with_progress", "count_bar"]


def _bars(r: Renderer, quiet: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[unit]} · {task.fields[rates]}"),
        TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
        console=r.err, disable=quiet or not r.err.is_terminal, transient=True,
    )


def count_bar(r: Renderer, label: str | None, unit: str = "", *, quiet: bool) -> Progress:
    """Return a plain bar on stderr: `label` (or each task's description), done/total `unit`, elapsed."""
    columns = [TextColumn(label if label is not None else "{task.description}"), BarColumn(), MofNCompleteColumn()]
    if unit:
        columns.append(TextColumn(unit))
    return Progress(*columns, TimeElapsedColumn(), console=r.err, disable=quiet, transient=True)


def _callbacks(bar: Progress) -> dict[str, Any]:
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


def index_with_progress(r: Renderer, m: Metis, base: str, paths: list[Path], source: str | None, *, quiet: bool,
                        max_file_bytes: int | None = None, batch_documents: int = 100) -> IndexReport:
    """Index `paths` into `base` with two bars on stderr: "indexing" (documents, words phase), then "embedding"."""
    with _bars(r, quiet) as bar:
        return m.index(base, *paths, source=source, max_file_bytes=max_file_bytes,
                       batch_documents=batch_documents, **_callbacks(bar))


def reindex_with_progress(r: Renderer, m: Metis, base: str, *, quiet: bool,
                          **options: Any) -> list[tuple[Any, IndexReport]]:
    """Index every folder source of `base` again, each with its own bars; return (source, report) pairs."""
    pairs = []
    found = m.sources(base)
    if not found:
        m.reindex(base)  # raises: the base has no folder source
    for s in found:
        with _bars(r, quiet) as bar:
            reports = m.reindex(base, only=[s.name], **options, **_callbacks(bar))
        pairs.append((s, reports[0]))
    return pairs
