"""The indexing pipeline: read → chunk → tokenize → store, then embed (SPEC F2-F4).

Two phases (issue 14): phase 1 (words) reads, chunks, tokenizes and writes every
new or changed document's chunks and postings for the whole run without calling
the embedding model, so keyword search answers as soon as a batch is written
(hybrid searches meanwhile answer with the ``NO_VECTOR_YET`` warning); chunks of
a changed document whose text did not change keep their vectors. Phase 2
(meaning) then embeds every chunk of the base lacking a vector
(:func:`embed_missing`), writing each batch as it finishes: a Ctrl-C or kill
keeps what is embedded and the next run embeds only the rest.

Incremental (F3): a document whose content hash is unchanged is skipped; a
changed one is re-chunked and written in the transaction that also deletes its
previous version (reusing the vectors of chunks whose text did not change); a
document gone from its folder is deleted with everything it owns. Documents are
written in batches, one transaction each (:class:`_Batch`).

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

import dataclasses
import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg_pool import ConnectionPool

from . import storage
from .chunking import Chunk, chunk_document, embedding_text
from .config import BaseSpec, Settings
from .errors import DatabaseUnavailable, EmbeddingModelUnavailable, InvalidInput, UnreadableDocument
from .models.embed import Embedder
from .readers import display_path, kind_of, read_document, time_budget, versioned_hash
from .results import FailedDocument, IndexReport, ReembedReport
from .tokenizer import TOKENIZER_VERSION

__all__ = ["Progress", "EmbedProgress", "index_paths", "embed_missing", "walk_source", "reembed"]

log = logging.getLogger(__name__)

#: Called after each document: (documents done, documents in all, chunks written so far).
Progress = Callable[[int, int, int], None]

#: Called after each batch of phase 2: (chunks embedded so far, chunks to embed in all).
EmbedProgress = Callable[[int, int], None]

#: Texts per embedding call at most.
_EMBED_BATCH = 64


@dataclass
class _Run:
    """Counters of one indexing run."""

    base: str
    base_id: int = 0
    read: int = 0
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    deleted: int = 0
    failed: list[FailedDocument] = field(default_factory=list)
    chunks: int = 0
    chunks_embedded: int = 0
    warnings: list[str] = field(default_factory=list)
    model_down: str | None = None


def walk_source(
    root: Path,
    on_skip: Callable[[Path, str], None] | None = None,
    on_unlisted: Callable[[Path, str], None] | None = None,
) -> Iterator[Path]:
    """Yield the files under `root` a base reads, sorted, never leaving `root`.

    Hidden files and folders (``.git``) are skipped; symbolic links to folders
    are not followed (no loops), links to files outside `root`, dangling links
    and link loops are skipped, and so are links to a file of `root` that is
    indexed under its own name (no document twice): each is logged and given to
    `on_skip(path, reason)`.

    The walk is iterative (a folder nested thousands of levels deep raises no
    RecursionError). A folder that cannot be listed (no permission, I/O error,
    name too long) is logged and given to `on_unlisted(folder, reason)`; the walk
    goes on. A file whose type cannot be read is yielded: opening it gives the reason.
    """
    root = root.resolve()
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError as exc:
            reason = f"cannot be listed ({exc.strerror or exc})"
            log.warning("folder %s %s", display_path(str(folder)), reason)
            if on_unlisted is not None:
                on_unlisted(folder, reason)
            continue
        folders: list[str] = []
        files: list[os.DirEntry] = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                is_folder = entry.is_dir()
            except OSError:
                is_folder = False
            if is_folder:
                try:
                    link = entry.is_symlink()
                except OSError:
                    link = True
                if not link:
                    folders.append(entry.name)
            elif kind_of(entry.name) is not None:
                files.append(entry)
        for entry in sorted(files, key=lambda e: e.name):
            path = folder / entry.name
            reason = _link_refusal(root, path, entry)
            if reason is not None:
                log.warning("skipped %s: %s", display_path(str(path)), reason)
                if on_skip is not None:
                    on_skip(path, reason)
                continue
            yield path
        stack.extend(folder / name for name in sorted(folders, reverse=True))


def _link_refusal(root: Path, path: Path, entry: os.DirEntry) -> str | None:
    """Return why a symbolic link `path` is not followed, or None (not a link, or a link to a file in `root`)."""
    try:
        if not entry.is_symlink():
            return None
    except OSError:
        return None  # opening the file says what is wrong with it
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):  # ELOOP (RuntimeError before Python 3.13), dangling
        return "symbolic link loop or dangling link: not followed"
    if not target.is_relative_to(root):
        return f"symbolic link leaving {root}: not followed"
    try:
        if not target.is_file():
            return "symbolic link to something other than a file: not followed"
    except OSError as exc:
        return f"symbolic link to something that cannot be read ({exc.strerror or exc}): not followed"
    inside = target.relative_to(root)
    if kind_of(target.name) is not None and not any(part.startswith(".") for part in inside.parts):
        # Debian's docs link index.html -> python-policy.html: the target is indexed itself, and a
        # second copy would put every passage twice in the results.
        return f"symbolic link to {display_path(inside.as_posix())}, which is indexed under its own name"
    return None


def _hash_file(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def _embed(embedder: Embedder, texts: Sequence[str]):
    out = []
    for i in range(0, len(texts), _EMBED_BATCH):
        out.extend(embedder.embed_passages(texts[i : i + _EMBED_BATCH]))
    return out


def _reused_vectors(chunks: Sequence[Chunk], reuse: dict) -> list:
    """Return per chunk the vector of an unchanged chunk text (`reuse`: embedding text → vector), else None."""
    return [reuse.get(embedding_text(c.title, c.headings, c.text)) for c in chunks]


def embed_missing(
    pool: ConnectionPool,
    base: storage.BaseRow,
    embedder: Embedder,
    *,
    batch: int | None = None,
    on_progress: EmbedProgress | None = None,
) -> int:
    """Embed every chunk of `base` lacking a vector of its model; return how many.

    Chunks are taken oldest first, `batch` at a time (None: the
    ``METIS_EMBED_BATCH_CHUNKS`` setting, default 64); each batch's vectors are
    written (one transaction) before the next is embedded, so an interruption
    loses at most one batch. `on_progress(chunks embedded, chunks to embed)` is
    called once before the first batch and after each one; "to embed" grows if
    another writer adds chunks meanwhile.

    Raises:
        EmbeddingModelUnavailable: the model did not answer (vectors embedded before stay).
    """
    spec = BaseSpec.from_json(base.spec)
    batch = Settings.from_env().embed_batch_chunks if batch is None else batch
    done = 0
    with pool.connection() as conn:
        todo = storage.count_chunks_without_vector(conn, base.base_id, spec.fingerprint)
    if on_progress and todo:
        on_progress(0, todo)
    while True:
        with pool.connection() as conn:
            rows = storage.chunks_without_vector(conn, base.base_id, spec.fingerprint, batch)
        if not rows:
            return done
        vectors = _embed(embedder, [embedding_text(t, h, x) for _, _, t, h, x in rows])
        with pool.connection() as conn:
            storage.write_vectors(
                conn, base.base_id, spec.fingerprint, [(r[0], r[1], v) for r, v in zip(rows, vectors)]
            )
        done += len(rows)
        if on_progress:
            on_progress(done, max(todo, done))


def _refuse_nested_sources(conn: psycopg.Connection, base: storage.BaseRow, planned: Sequence[tuple[str, Path]]
                           ) -> None:
    """Refuse a folder inside (or holding) the folder of another source of the base: its files
    would be indexed twice, under two sources, and every passage would come up twice.

    Raises:
        InvalidInput: naming the source that already reads them and the command to run instead.
    """
    existing = storage.source_roots(conn, base.base_id)
    for name, root in planned:
        for other_name, other_root in existing:
            other = Path(other_root)
            if other_name == name or root == other:
                continue  # the same source (its folder is checked by storage.ensure_source)
            if root.is_relative_to(other):
                raise InvalidInput(
                    f"{display_path(str(root))} is inside {display_path(other_root)}, which source {other_name!r} of"
                    f" base {base.name!r} already reads: index that folder again (metis index"
                    f" {display_path(other_root)} --base {base.name}; unchanged files are skipped)")
            if other.is_relative_to(root):
                raise InvalidInput(
                    f"{display_path(str(root))} holds {display_path(other_root)}, which source {other_name!r} of"
                    f" base {base.name!r} already reads: its files would be indexed twice; index the other"
                    f" folders one by one, or into another base")


def _source_of(
    path: Path,
    source_name: str | None,
    on_skip: Callable[[Path, str], None] | None = None,
    on_unlisted: Callable[[Path, str], None] | None = None,
) -> tuple[str, Path, list[Path], bool]:
    """Return (source name, folder, files, whether absent files are deletions).

    Raises:
        InvalidInput: `path` does not exist, cannot be examined, or is a file of a kind not read.
    """
    path = path.expanduser()
    shown = display_path(str(path))
    try:
        if not path.exists():
            raise InvalidInput(f"no such file or folder: {shown}")
        if path.is_dir():
            root = path.resolve()
            name = source_name or display_path(root.name) or "root"
            return name, root, list(walk_source(root, on_skip, on_unlisted)), True
    except OSError as exc:
        raise InvalidInput(f"cannot read {shown}: {exc.strerror or exc}") from exc
    if kind_of(path.name) is None:
        raise InvalidInput(f"{shown}: not a kind metis reads (md, txt, html, pdf, docx)")
    root = path.resolve().parent
    return source_name or display_path(root.name) or "root", root, [path.resolve()], False


def index_paths(
    pool: ConnectionPool,
    base: storage.BaseRow,
    paths: Sequence[str | os.PathLike],
    embedder: Embedder | None,
    *,
    source_name: str | None = None,
    on_progress: Progress | None = None,
    batch_documents: int = 100,
    file_time_budget_s: float | None = None,
    on_embed_progress: EmbedProgress | None = None,
) -> IndexReport:
    """Index files and folders into `base`; return what was done.

    Phase 1 writes the words of every new or changed document (searchable by
    keyword batch by batch), phase 2 then embeds every chunk of the base without
    a vector (module docstring). The base shows ``indexing`` throughout, then
    ``ready``, or ``waiting`` when the model did not answer.

    A folder is a source (named after it unless `source_name`); its documents that
    are gone from it are deleted, except those under a folder that could not be
    listed (kept, with a warning naming the folder). A single file is indexed into
    the source of its folder. Documents are written in batches of at most
    `batch_documents` (see :class:`_Batch`).

    Args:
        on_progress: phase 1, after each file: (documents done, documents in all, chunks written).
        on_embed_progress: phase 2, after each batch of vectors: (chunks embedded, chunks to embed).
        file_time_budget_s: seconds the reading and chunking of one file may take
            before it is skipped ("took longer than 60 s to read: skipped"); None:
            the ``METIS_FILE_TIME_BUDGET_S`` setting (default 60). The bound is
            checked in the readers' and chunker's loops: one library call that does
            not return to them (pypdf on one page, the HTML parse) can overrun it
            (:func:`metis_pg.readers.time_budget`).

    Raises:
        InvalidInput: a path does not exist, cannot be examined, or is not a kind metis reads.
    """
    started = time.perf_counter()
    spec = BaseSpec.from_json(base.spec)
    run = _Run(base=base.name, base_id=base.base_id)
    budget = Settings.from_env().file_time_budget_s if file_time_budget_s is None else file_time_budget_s
    unlisted: dict[Path, str] = {}

    def skipped(path: Path, reason: str) -> None:
        run.warnings.append(f"{display_path(str(path))}: skipped: {display_path(reason)}")

    def not_listed(folder: Path, reason: str) -> None:
        unlisted[folder] = reason

    plans = [_source_of(Path(p), source_name, skipped, not_listed) for p in paths]
    for name, _, _, _ in plans:
        if name == f"metis-{base.name}":
            raise InvalidInput(
                f"the source name {name!r} is reserved for the notes and facts of base {base.name!r}:"
                " name the folder's source with --source"
            )
    total = sum(len(files) for _, _, files, _ in plans)

    with pool.connection() as conn:
        _refuse_nested_sources(conn, base, [(name, root) for name, root, _, _ in plans])
        # Every source is checked (a name reading another folder is refused) before anything is
        # written or the base is marked as indexing: a refused run leaves the base as it was.
        source_ids = [
            storage.ensure_source(conn, base.base_id, name, display_path(str(root)), whole_folder=deletes)
            for name, root, _, deletes in plans
        ]
        storage.set_status(conn, base.base_id, "indexing")

    # Phase 1 (words): no call to the embedding model. A base whose postings an older tokenizer
    # made reads every document again (vectors of unchanged chunk texts are reused).
    retokenize = spec.tokenizer_version != TOKENIZER_VERSION
    done = 0
    for (name, root, files, deletes), source_id in zip(plans, source_ids):
        with pool.connection() as conn:
            known = storage.document_hashes(conn, source_id)
        seen: set[str] = set()
        batch = _Batch(pool, base.base_id, source_id, spec.fingerprint, run, max_documents=batch_documents)
        for path in files:
            rel = display_path(path.relative_to(root).as_posix())
            if rel in seen:  # two names alike once their undecodable bytes are written \xNN
                run.failed.append(FailedDocument(rel, f"{display_path(str(path))}: another file of this folder"
                                                      f" is indexed under the same name {rel!r}: skipped"))
            else:
                seen.add(rel)
                pending = _read_file(pool, spec, run, path, rel, known.get(rel), budget, retokenize=retokenize)
                if pending is not None:
                    batch.add(pending)
            batch.write_if_due()  # also after unchanged or unreadable files: queued ones wait a second at most
            done += 1
            if on_progress:
                on_progress(done, total, run.chunks)
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
                with pool.connection() as conn:
                    storage.delete_document(conn, base.base_id, document_id)
                run.deleted += 1
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
    if retokenize and not run.failed and not unlisted and all(deletes for _, _, _, deletes in plans):
        with pool.connection() as conn:
            if storage.mark_tokenized(conn, base.base_id, source_ids, TOKENIZER_VERSION):
                spec = dataclasses.replace(spec, tokenizer_version=TOKENIZER_VERSION)
            else:
                run.warnings.append(
                    f"base {base.name!r} still holds documents of other folders with the terms of tokenizer"
                    f" version {spec.tokenizer_version}: `metis index --base {base.name}` re-tokenizes every folder"
                )

    # Phase 2 (meaning): every chunk of the base without a vector, this run's and earlier ones'.
    if embedder is not None:
        try:
            run.chunks_embedded += embed_missing(pool, base, embedder, on_progress=on_embed_progress)
        except EmbeddingModelUnavailable as exc:
            run.model_down = exc.message
            run.warnings.append(f"{exc.message}: chunks stored without vectors; `metis index` embeds them later")

    with pool.connection() as conn:
        missing = storage.count_chunks_without_vector(conn, base.base_id, spec.fingerprint)
        status = "waiting" if missing else "ready"
        storage.set_status(conn, base.base_id, status, indexed=True)
    if run.read == 0 and not run.failed and total == 0 and not unlisted:
        run.warnings.append("nothing is indexed: the sources hold no document it reads (md, txt, html, pdf, docx)")
    return IndexReport(
        base=base.name, read=run.read, new=run.new, changed=run.changed, unchanged=run.unchanged,
        deleted=run.deleted, failed=tuple(run.failed), chunks=run.chunks, chunks_embedded=run.chunks_embedded,
        chunks_without_vector=missing, status=status, warnings=tuple(run.warnings),
        seconds=time.perf_counter() - started,
    )


#: A batch of documents is written (one transaction) once it holds this many chunks,
#: its maximum of documents, or its first document has waited this many seconds.
_BATCH_CHUNKS = 500
_BATCH_SECONDS = 1.0


class _Batch:
    """Documents read, waiting to be written in one transaction.

    Writing many small documents at once costs one update of the base's BM25
    statistics instead of one per document (docs/performance.md). A document is
    searchable by its words at most about a second after it was read, and a process
    killed before :meth:`write` loses only the unwritten batch: the next ``metis index``
    reads those files again, as they are still new or changed.
    """

    def __init__(self, pool: ConnectionPool, base_id: int, source_id: int, model: str, run: _Run, *,
                 max_documents: int) -> None:
        self._pool, self._base_id, self._source_id, self._model, self._run = pool, base_id, source_id, model, run
        self._max_documents = max_documents
        self._pending: list[storage.PendingDocument] = []
        self._chunks = 0
        self._since = 0.0

    def add(self, document: storage.PendingDocument) -> None:
        """Queue a document; write the batch once it is full or has waited long enough."""
        if not self._pending:
            self._since = time.monotonic()
        self._pending.append(document)
        self._chunks += len(document.chunks)
        # Counted when queued, so progress moves with reading; a failed write raises anyway.
        self._run.chunks += len(document.chunks)
        if document.replaces is None:
            self._run.new += 1
        else:
            self._run.changed += 1
        self.write_if_due()

    def write_if_due(self) -> None:
        """Write the batch if it is full or its first document has waited long enough."""
        if self._pending and (self._chunks >= _BATCH_CHUNKS or len(self._pending) >= self._max_documents
                              or time.monotonic() - self._since >= _BATCH_SECONDS):
            self.write()

    def write(self) -> None:
        """Write the queued documents in one transaction."""
        if not self._pending:
            return
        with self._pool.connection() as conn:
            storage.write_documents(conn, base_id=self._base_id, source_id=self._source_id,
                                    documents=self._pending, model=self._model)
        self._pending, self._chunks = [], 0


def _read_file(
    pool: ConnectionPool,
    spec: BaseSpec,
    run: _Run,
    path: Path,
    rel: str,
    known: tuple[int, str] | None,
    budget_s: float | None = None,
    *,
    retokenize: bool = False,
) -> storage.PendingDocument | None:
    """Read and chunk a new or changed file; None when it is unchanged or unreadable.

    With `retokenize` (the base's postings are an older tokenizer's) an unchanged file
    is read again too, and counted as changed.

    Its chunks carry the vectors of the chunk texts its indexed version already
    had, and None for the others (embedded in phase 2).

    Any exception while reading or chunking the file, except a database error,
    puts it in ``run.failed`` with a reason naming it (:func:`_failure_reason`);
    a file already indexed keeps its indexed version.
    """
    shown = display_path(str(path))
    try:
        info = path.stat()
        if not path.is_file():  # a FIFO or device named .txt would block the hash below
            raise UnreadableDocument(f"{shown}: not a regular file")
        size = info.st_size
        if size > spec.max_file_bytes:
            raise UnreadableDocument(f"{shown}: {size:,} bytes is over the limit of {spec.max_file_bytes:,} bytes")
        file_hash, size = _hash_file(path)
        content_hash = versioned_hash(file_hash, kind_of(path))  # a newer reader reads the file again
        if known is not None and known[1] == content_hash and not retokenize:
            run.unchanged += 1
            return None
        with time_budget(budget_s, str(path)):
            document = read_document(path, max_bytes=spec.max_file_bytes)
            chunks = chunk_document(document, chunk_size=spec.chunk_size)
    except (psycopg.Error, DatabaseUnavailable):
        raise
    except Exception as exc:  # noqa: BLE001 - one file never ends the run (module docstring)
        reason = _failure_reason(shown, exc)
        if known is not None:
            reason += " (its indexed version is kept)"
        log.warning("skipped %s", reason)
        run.failed.append(FailedDocument(rel, reason))
        return None
    run.read += 1
    for w in document.warnings:
        run.warnings.append(f"{rel}: {w}")
    with pool.connection() as conn:
        reuse = storage.reusable_vectors(conn, run.base_id, known[0], spec.fingerprint) if known else {}
    vectors = _reused_vectors(chunks, reuse)
    meta = storage.DocumentMeta(rel, document.title, document.kind, content_hash, size)
    return storage.PendingDocument(meta, chunks, vectors, replaces=known[0] if known else None)


def _failure_reason(shown: str, exc: Exception) -> str:
    """Return why a file was skipped, starting with its path `shown`: ``"<path>: <reason>"``."""
    if isinstance(exc, UnreadableDocument):
        return display_path(exc.message)
    if isinstance(exc, OSError):
        return f"{shown}: cannot open: {exc.strerror or exc}"
    if isinstance(exc, RecursionError):
        return f"{shown}: nested too deeply to read (RecursionError)"
    if isinstance(exc, MemoryError):
        return f"{shown}: out of memory while reading"
    detail = display_path(str(exc))[:300]
    return f"{shown}: could not be read ({type(exc).__name__}{': ' + detail if detail else ''})"


#: Attempts to switch a base to its new model while indexers keep adding chunks.
_SWITCH_ATTEMPTS = 5


def reembed(
    pool: ConnectionPool,
    base: storage.BaseRow,
    new_spec: BaseSpec,
    embedder: Embedder,
    *,
    on_progress: Callable[[int, int], None] | None = None,
    batch: int = 256,
) -> ReembedReport:
    """Give every chunk of `base` a vector of `new_spec`'s model, then switch the base to it.

    The new vectors are written beside the old ones (``embeddings`` is keyed by
    chunk and model fingerprint), so searches keep using the old model until the
    switch: one transaction that checks every chunk has a new vector and stores
    `new_spec`. The old model's vectors are deleted after it. A search never mixes
    two models (the statement filters on the spec's fingerprint).

    `on_progress(chunks done, chunks to do)` is called after each batch.

    Raises:
        EmbeddingModelUnavailable: the new model did not answer; the base keeps its
            old model and vectors (new vectors written so far stay for the next try).
        EmbeddingDimensionMismatch: the new model's vectors are not ``new_spec.embedding_dim`` long.
    """
    started = time.perf_counter()
    old_model = BaseSpec.from_json(base.spec).fingerprint
    model = new_spec.fingerprint
    with pool.connection() as conn:
        todo = storage.count_chunks_without_vector(conn, base.base_id, model)
    done = 0
    for attempt in range(1, _SWITCH_ATTEMPTS + 1):
        while True:
            with pool.connection() as conn:
                rows = storage.chunks_without_vector(conn, base.base_id, model, batch)
            if not rows:
                break
            vectors = _embed(embedder, [embedding_text(t, h, x) for _, _, t, h, x in rows])
            with pool.connection() as conn:
                storage.write_vectors(conn, base.base_id, model, [(r[0], r[1], v) for r, v in zip(rows, vectors)])
            done += len(rows)
            if on_progress:
                on_progress(done, max(todo, done))
        # The last attempt switches anyway: chunks an indexer added meanwhile wait for
        # their vector (status waiting; the next `metis index` embeds them).
        with pool.connection() as conn:
            if storage.switch_embedding(conn, base.base_id, new_spec.to_json(), model,
                                        force=attempt == _SWITCH_ATTEMPTS):
                break
    with pool.connection() as conn:
        deleted = storage.delete_other_vectors(conn, base.base_id, model)
        missing = storage.chunks_without_vector(conn, base.base_id, model, 1)
        storage.set_status(conn, base.base_id, "waiting" if missing else "ready")
    return ReembedReport(
        base=base.name, old_model=old_model, new_model=model, chunks_embedded=done,
        vectors_deleted=deleted, seconds=time.perf_counter() - started,
    )
