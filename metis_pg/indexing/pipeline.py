"""The indexing pipeline: read → chunk → tokenize → write words → embed vectors (SPEC F2-F4).

The base is ensured (looked up, or created with the defaults) by ``Metis.index`` before it
calls :func:`index` with the base's row and embedder: nothing here calls back up into the API.

Two phases (issue 14): phase 1 (words) reads, chunks, tokenizes and writes every
new or changed document's chunks and postings for the whole run without calling
the embedding model, so keyword search answers as soon as a batch is written
(hybrid searches meanwhile answer with the ``NO_VECTOR_YET`` warning); chunks of
a changed document whose text did not change keep their vectors. Phase 2
(meaning) then embeds every chunk of the base lacking a vector
(:func:`embed_missing`), each distinct embedding text once (a text some chunk of
the base already has a vector for is not embedded again), writing each batch as it finishes: a Ctrl-C or kill
keeps what is embedded and the next run embeds only the rest.

Incremental (F3): a document whose content hash is unchanged is skipped; a
changed one is re-chunked and written in the transaction that also deletes its
previous version (reusing the vectors of chunks whose text did not change); a
document gone from its folder is deleted with everything it owns. Documents are
written in batches, one transaction each (:class:`~.run.Batch`).

When the embedding model does not answer (F14), the chunks keep no vector,
the base becomes ``waiting``, and the model is not called again during that
run; the next run embeds exactly the chunks that lack a vector, then returns
the base to ``ready``.

One file never stops a run (issue 13): any exception while reading or
chunking one file (a reader's refusal, an ``OSError``, a parser's
``ValueError`` or ``RecursionError``, ``MemoryError``, the per-file time
budget running out, ...) skips that file with a reason naming it in
``report.failed``; only ``KeyboardInterrupt``/``SystemExit`` and database errors
end the run. Everything stored is cleaned of NUL and lone surrogates
(:func:`metis_pg.readers.clean_document`). A file name with bytes that are not
UTF-8 is indexed under its relative path with each such byte written ``\\xNN``
(``caf\\xe9.md``): the same name on every run, so it is unchanged the second
time and its deletion is seen. A folder that cannot be listed (permissions, I/O
error) keeps its indexed documents, with a warning naming it: a walk error is
never a deletion; a file that is listed but cannot be opened keeps its indexed
version too (it is in ``report.failed``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import db, storage
from ..config import Settings
from ..documents import SourceInfo
from ..errors import (
    DiskFull,
    EmbeddingModelUnavailable,
    InvalidInput,
    MetisError,
)
from ..disk_space import BYTES_PER_VECTOR, DiskGuard
from ..models.embed import Embedder
from ..readers import display_path
from ..reports import FailedDocument, IndexReport
from ..tokenizer import TOKENIZER_VERSION
from . import sources, vectors
from .reading import read_file
from .run import Batch, Run

__all__ = ["Progress", "index", "index_paths", "reindex", "embed_own"]

#: Called after each document: (documents done, documents in all, chunks written so far).
Progress = Callable[[int, int, int], None]


def index(
    pool: db.Pool,
    settings: Settings,
    row: storage.BaseRow,
    paths: Sequence[str | os.PathLike],
    embedder: Embedder | None,
    *,
    created: bool = False,
    max_file_bytes: int | None = None,
    **options,
) -> IndexReport:
    """Index files and folders into the base of `row`, embedding with `embedder`.

    Runs :func:`index_paths` as the base's one indexer (:func:`metis_pg.storage.indexer_session`).
    `created`: the caller created the base for this run (``Metis.index`` ensures the base before
    it calls here); a refused run (a missing folder, a reserved source name) then leaves none
    behind. `max_file_bytes` overrides the spec's for this run; `options` are those of
    :func:`index_paths`.

    Raises:
        InvalidInput, BaseBusy, DatabaseUnavailable: as :func:`index_paths` and the indexer lock.
    """
    try:
        if max_file_bytes is not None:
            row = dataclasses.replace(row, spec={**row.spec, "max_file_bytes": max_file_bytes})
        with storage.indexer_session(pool, row.base_id) as lock:
            return index_paths(pool, settings, row, paths, embedder, regain=lock.regain, **options)
    except MetisError:
        if created:
            with contextlib.suppress(MetisError):  # the run's own error is the one to report
                with pool.connection() as conn:
                    rows = storage.list_bases(conn, row.name)
                    if rows and not rows[0]["documents"]:
                        storage.drop_base(conn, row.name)
        raise


def index_paths(
    pool: db.Pool,
    settings: Settings,
    base: storage.BaseRow,
    paths: Sequence[str | os.PathLike],
    embedder: Embedder | None,
    *,
    source_name: str | None = None,
    on_progress: Progress | None = None,
    batch_documents: int = 100,
    file_time_budget_s: float | None = None,
    on_embed_progress: vectors.EmbedProgress | None = None,
    access: dict[str, Any] | None = None,
    regain: Callable[[], None] | None = None,
) -> IndexReport:
    """Index files and folders into `base`; return what was done.

    Phase 1 writes the words of every new or changed document (searchable by
    keyword batch by batch), phase 2 then embeds every chunk of the base without
    a vector (module docstring). The base shows ``indexing`` throughout, then
    ``ready``, or ``waiting`` when the model did not answer. After each phase that wrote,
    the tables autovacuum's rule says are due are ANALYZEd and VACUUMed
    (:func:`metis_pg.storage.maintain`; its time is in the report's ``seconds``).

    A folder is a source (named after it unless `source_name`); its documents that
    are gone from it are deleted, except those under a folder that could not be
    listed (kept, with a warning naming the folder). A single file is indexed into
    the source of its folder. Documents are written in batches of at most
    `batch_documents` (see :class:`~.run.Batch`).

    Args:
        on_progress: phase 1, after each file: (documents done, documents in all, chunks written).
        on_embed_progress: phase 2, after each batch of vectors: (chunks embedded, chunks to embed).
        file_time_budget_s: seconds the reading and chunking of one file may take
            before it is skipped ("took longer than 60 s to read: skipped"); None:
            ``settings.file_time_budget_s`` (default 60). The bound is
            checked in the readers' and chunker's loops: one library call that does
            not return to them (pypdf on one page, the HTML parse) can overrun it
            (:func:`metis_pg.readers.time_budget`).
        access: ``readers`` and ``front_matter_readers`` of each source given
            (:func:`metis_pg.storage.set_source_readers`), set before any document is written;
            None keeps the sources'.
        regain: holds the base's indexer lock again after the server went away
            (:meth:`metis_pg.storage.locks.IndexerLock.regain`): a batch whose write the server
            went away in is written again once it is back (:class:`~.run.Batch`).

    Raises:
        InvalidInput: a path does not exist, cannot be examined, or is not a kind metis reads.
    """
    started = time.perf_counter()
    spec = base.base_spec
    run = Run(base=base.name, base_id=base.base_id)
    budget = settings.file_time_budget_s if file_time_budget_s is None else file_time_budget_s
    unlisted: dict[Path, str] = {}

    def skipped(path: Path, reason: str) -> None:
        run.warnings.append(f"{display_path(str(path))}: skipped: {display_path(reason)}")

    def not_listed(folder: Path, reason: str) -> None:
        unlisted[folder] = reason

    plans = [sources.plan_source(Path(p), source_name, skipped, not_listed) for p in paths]
    sources.refuse_reserved_names(base, plans)
    total = sum(len(plan.files) for plan in plans)

    with pool.connection() as conn:
        sources.refuse_nested_sources(conn, base, plans)
        # Every source is checked (a name reading another folder is refused) before anything is
        # written or the base is marked as indexing: a refused run leaves the base as it was.
        source_ids = [
            storage.ensure_source(conn, base.base_id, name, display_path(str(root)), whole_folder=deletes)
            for name, root, _, deletes in (_fields(p) for p in plans)
        ]
        for source_id in source_ids if access else ():  # before any document of the run is written
            storage.set_source_readers(conn, source_id, **access)
        storage.set_status(conn, base.base_id, "indexing")

    # A full disk foreseen (issue 26): every write checks first that it leaves the margin free.
    guard = DiskGuard.of(pool, settings)
    try:
        guard.check_pool(pool, 0)
        # Phase 1 (words): no call to the embedding model. A base whose postings an older tokenizer
        # made reads every document again (vectors of unchanged chunk texts are reused).
        retokenize = spec.tokenizer_version != TOKENIZER_VERSION
        done = 0
        for (name, root, files, deletes), source_id in zip((_fields(p) for p in plans), source_ids):
            for attempt in db.while_gone(settings, f"source {name}: reading its documents"):
                with attempt, pool.connection() as conn:
                    known = storage.document_hashes(conn, source_id)
            seen: set[str] = set()
            with Batch(pool, base.base_id, source_id, spec.fingerprint, run, max_documents=batch_documents,
                       guard=guard, regain=regain) as batch:  # written while the next files are read (run.Batch)
                for path in files:
                    rel = display_path(path.relative_to(root).as_posix())
                    if rel in seen:  # two names alike once their undecodable bytes are written \xNN
                        run.failed.append(FailedDocument(rel, f"{display_path(str(path))}: another file of this folder"
                                                              f" is indexed under the same name {rel!r}: skipped"))
                    else:
                        seen.add(rel)
                        pending = read_file(pool, settings, spec, run, path, root, rel, known.get(rel), budget,
                                             retokenize=retokenize)
                        if pending is not None:
                            batch.add(pending)
                    batch.write_if_due()  # also after unchanged or unreadable files: queued ones wait a second at most
                    done += 1
                    if on_progress:
                        on_progress(done, total, run.counts["chunks"])
                batch.write()
            # A folder that could not be listed is not a folder whose files are gone.
            blind = [display_path(f.relative_to(root).as_posix()) for f in unlisted if f.is_relative_to(root)]
            kept: dict[str, int] = {}
            if deletes:
                for rel, (document_id, _) in known.items():
                    if rel in seen:
                        continue
                    hidden = next((b for b in blind if b == "." or rel.startswith(b + "/")), None)
                    if hidden is not None:
                        kept[hidden] = kept.get(hidden, 0) + 1
                        continue
                    for attempt in db.while_gone(settings, f"{rel}: deleting it"):  # deleting twice deletes once
                        with attempt, pool.connection() as conn:
                            storage.delete_document(conn, base.base_id, document_id)
                    run.counts["deleted"] += 1
            for folder, reason in unlisted.items():
                if not folder.is_relative_to(root):
                    continue
                rel = display_path(folder.relative_to(root).as_posix())
                count = kept.get(rel, 0)
                run.warnings.append(
                    f"{display_path(str(folder))}: folder {reason}: not indexed"
                    + (f"; its {count} indexed document{'' if count == 1 else 's'} kept, not deleted" if count else "")
                )

        # Re-tokenized only when every document of those sources was read: whole folders, all listed.
        if retokenize and not run.failed and not unlisted and all(p.deletes for p in plans):
            with pool.connection() as conn:
                if storage.mark_tokenized(conn, base.base_id, source_ids, TOKENIZER_VERSION, spec.field_weight):
                    spec = dataclasses.replace(spec, tokenizer_version=TOKENIZER_VERSION)
                else:
                    run.warnings.append(
                        f"base {base.name!r} still holds documents of other folders with the terms of tokenizer"
                        f" version {spec.tokenizer_version}: `metis index --base {base.name}` re-tokenizes every folder"
                    )

        # The words written: statistics and bm25_terms' dead row versions kept now, not left to an
        # autovacuum that a CLI command's embedded server never lives to see (storage.maintenance):
        # keyword searches run on them while phase 2 embeds. The due rule keeps a small run's cost
        # at one query.
        if run.counts["new"] or run.counts["changed"] or run.counts["deleted"]:
            storage.maintain(pool)

        # Phase 2 (meaning): every chunk of the base without a vector, this run's and earlier ones'.
        if embedder is not None:
            refused: dict[int, tuple[int, str]] = {}

            def written(n: int) -> None:  # counted per batch: a model that stops later keeps this count right
                run.counts["chunks_embedded"] += n

            try:
                embedded = vectors.embed_missing(pool, base, embedder, batch=settings.embed_batch_chunks,
                                                 max_chars=settings.embed_max_chars, on_progress=on_embed_progress,
                                                 on_written=written, refused=refused,
                                                 before_write=lambda n: guard.check_pool(pool, n * BYTES_PER_VECTOR))
                run.counts["vectors_reused"] += embedded.reused
            except EmbeddingModelUnavailable as exc:
                run.model_down = exc.message
                run.warnings.append(f"{exc.message}: chunks stored without vectors; `metis index` embeds them later")
            refusal = vectors.refusal_warning(pool, refused)
            if refusal is not None:
                run.warnings.append(refusal)
            if run.counts["chunks_embedded"] or refused:  # embeddings, vector_notes (as after phase 1)
                storage.maintain(pool)

        with pool.connection() as conn:
            missing = storage.count_chunks_without_vector(conn, base.base_id, spec.fingerprint)
            # Chunks the model refused are not sent again (vector_notes): nothing is left to wait for.
            refused_chunks = storage.count_refused(conn, base.base_id, spec.fingerprint, settings.embed_max_chars)
            status = "waiting" if missing > refused_chunks else "ready"
            storage.set_status(conn, base.base_id, status, indexed=True)
        if run.counts["read"] == 0 and not run.failed and total == 0 and not unlisted:
            run.warnings.append("nothing is indexed: the sources hold no document it reads (md, txt, html, pdf, docx)")
        return IndexReport(
            base=base.name, **run.counts, failed=tuple(run.failed),
            chunks_without_vector=missing, chunks_refused=refused_chunks, status=status,
            warnings=tuple(run.warnings),
            seconds=time.perf_counter() - started,
        )
    except DiskFull:
        with pool.connection() as conn:  # the base as its rows are, not left "indexing"
            missing = (storage.count_chunks_without_vector(conn, base.base_id, spec.fingerprint)
                       - storage.count_refused(conn, base.base_id, spec.fingerprint, settings.embed_max_chars))
            # Not a finished run: last_indexed_at stays that of the last one (a first run stopped
            # before its first document stamped it, and searches then said the sources hold nothing).
            storage.set_status(conn, base.base_id, "waiting" if missing else "ready")
        raise


def reindex(
    base: str,
    found: Sequence[SourceInfo],
    *,
    index_one: Callable[[Sequence[Path], str], IndexReport],
    status: Callable[[], str],
    only: Sequence[str] | None = None,
    on_source: Callable[[SourceInfo], None] | None = None,
) -> list[IndexReport]:
    """Index the folder sources `found` of `base` again (those named in `only`); one report each.

    ``index_one(paths, source name)`` indexes; ``status()`` is the base's status, for the report
    of a source not read. A source of single files (`metis index notes/todo.md`) reads those files
    again, not their whole folder; one gone from it is kept, with a warning naming it. A source
    whose folder is gone (or unreadable) is not read: its report has no counts and a warning.

    Raises:
        InvalidInput: no folder source to read.
    """
    found = [s for s in found if only is None or s.name in only]
    if not found:
        raise InvalidInput(f"base {base!r} has no folder to index again: give one (metis index FOLDER --base {base})")
    reports = []
    for s in found:
        if on_source is not None:
            on_source(s)
        targets, gone = [Path(s.root)], []
        if not s.whole_folder:
            files = [Path(s.root) / p for p in s.paths]
            targets = [f for f in files if f.is_file()]
            gone = [p for p, f in zip(s.paths, files) if not f.is_file()]
        kept = tuple(f"{Path(s.root) / p}: no longer a file: its document is kept (drop the base or index its"
                     f" folder to remove it)" for p in gone)
        if not targets:
            reports.append(IndexReport(base=base, status=status(), warnings=kept))
            continue
        try:
            report = index_one(targets, s.name)
            reports.append(dataclasses.replace(report, warnings=tuple(report.warnings) + kept) if kept else report)
        except InvalidInput as exc:
            reports.append(IndexReport(base=base, status=status(),
                                       warnings=(f"source {s.name!r} not read again: {exc.message};"
                                                 f" its {s.documents} documents are kept",)))
    return reports


def embed_own(pool: db.Pool, settings: Settings, base: storage.BaseRow, embedder: Embedder | None,
              document_id: int) -> None:
    """Embed a written note's or fact's chunks; when the model does not answer the base is ``waiting``
    (the next ``metis index`` embeds them, SPEC F14)."""
    if embedder is not None:
        try:
            vectors.embed_batches(pool, base.base_id, base.base_spec.fingerprint, embedder,
                                  batch=settings.embed_batch_chunks, max_chars=settings.embed_max_chars,
                                  document_id=document_id)
            return
        except EmbeddingModelUnavailable:
            pass
    with pool.connection() as conn:
        storage.set_status(conn, base.base_id, "waiting")


def _fields(plan: sources.SourcePlan) -> tuple[str, Path, list[Path], bool]:
    return plan.name, plan.root, plan.files, plan.deletes
