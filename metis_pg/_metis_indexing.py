"""The indexing methods of :class:`metis_pg.Metis`: index, re-index, re-embed, notes and facts.

Internal: a part of :class:`~metis_pg.api.Metis` (its base class), documented there; the work
is :mod:`metis_pg.indexing`'s and :mod:`metis_pg.notes`', imported by the methods that use them: a
search imports neither (``metis search``'s start-up, issue 25).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .config import LOCAL_EMBEDDING_MODELS
from .errors import BaseNotFound, InvalidInput

if TYPE_CHECKING:  # noqa: SIM114
    from . import access
if TYPE_CHECKING:  # pragma: no cover
    from . import documents, indexing
    from .reports import Fact, IndexReport, Note, ReembedReport

__all__ = ["IndexingMethods"]


class IndexingMethods:
    """:meth:`index`, :meth:`reindex`, :meth:`reembed`, notes and facts of a :class:`~metis_pg.Metis`."""

    # -- indexing ----------------------------------------------------------

    def index(
        self,
        base: str,
        *paths: str | os.PathLike,
        source: str | None = None,
        on_progress: indexing.Progress | None = None,
        max_file_bytes: int | None = None,
        batch_documents: int = 100,
        file_time_budget_s: float | None = None,
        on_embed_progress: indexing.EmbedProgress | None = None,
        readers: Sequence[str] | str | None = None,
        front_matter_readers: bool | None = None,
    ) -> IndexReport:
        """Index files and folders into `base` (created with defaults if missing); return the report.

        Two phases: the words of every new or changed document are written first
        (keyword search finds them within seconds), then the chunks without a
        vector are embedded (hybrid searches meanwhile say ``NO_VECTOR_YET``).

        Incremental (SPEC F3): unchanged documents are skipped, changed ones
        re-indexed, documents gone from an indexed folder deleted. Unreadable files
        are listed in ``report.failed`` with the reason; the rest still indexes.
        While it runs the base's status is ``indexing``; a process killed midway
        leaves every document it committed searchable, and the next run finishes.

        Args:
            on_progress: words phase, after each file: (documents done, documents in all, chunks written).
            on_embed_progress: embedding phase, after each batch: (chunks embedded, chunks to embed).
            max_file_bytes: for this run, skip files larger than this (default: the
                base spec's ``max_file_bytes``, 20 MB).
            batch_documents: documents written per transaction at most (1 to 10,000).
                Documents read are written once the batch holds this many, 500 chunks,
                or has waited a second, whichever comes first.
            file_time_budget_s: seconds one file's reading and chunking may take before it
                is skipped with a reason (default: ``METIS_FILE_TIME_BUDGET_S``, 60 s).
            readers: the groups that may read the documents of the sources given (a list, or
                ``"hr,legal"``; ``[]`` = every caller again), kept with each source and given to
                its documents already indexed in the same transaction, before any is written; None
                keeps each source's (:mod:`metis_pg.access`, docs/security.md).
            front_matter_readers: whether a document's own ``readers:`` (front matter) may narrow
                its source's readers; None keeps each source's (default off).

        Raises:
            InvalidInput: no path, a path that does not exist, a bad `max_file_bytes`
                or `batch_documents`.
        """
        if not paths:
            raise InvalidInput("give at least one file or folder to index (none: `reindex` reads every source again)")
        if max_file_bytes is not None and (not isinstance(max_file_bytes, int) or max_file_bytes < 1):
            raise InvalidInput(f"max_file_bytes must be a positive number of bytes, not {max_file_bytes!r}")
        if not isinstance(batch_documents, int) or not 1 <= batch_documents <= 10_000:
            raise InvalidInput(f"batch_documents must be a whole number from 1 to 10000, not {batch_documents!r}")
        # Ensure the base here, then one call down: the pipeline never climbs back to the Metis.
        try:
            row, created = self._base_row(base), False
        except BaseNotFound:
            self.create_base(base)  # with the defaults; its embedder is checked (and kept) there
            row, created = self._base_row(base), True
        from . import indexing
        return indexing.index(
            self.pool, self.settings, row, paths, self.embedder(row.base_spec), created=created,
            max_file_bytes=max_file_bytes, source_name=source, on_progress=on_progress,
            batch_documents=batch_documents, file_time_budget_s=file_time_budget_s,
            on_embed_progress=on_embed_progress,
            access=_source_access(readers, front_matter_readers),
        )

    def reembed(
        self,
        base: str,
        *,
        embedding_model: str | None = None,
        embedding_url: str | None = None,
        embedding_dim: int | None = None,
        query_prefix: str | None = None,
        passage_prefix: str | None = None,
        embedding_protocol: str = "openai",
        embedding_api_key_env: str | None = None,
        on_progress: "Callable[[int, int], None] | None" = None,
    ) -> ReembedReport:
        """Embed every chunk of `base` with another model and switch the base to it (SPEC F3).

        The new vectors are built beside the old ones; one transaction switches the
        base's spec; the old vectors are deleted after. Searches meanwhile use the
        old model, and never mix the two.

        Args:
            embedding_model: the new model; None keeps the model and changes only the
                other given fields (e.g. a new `embedding_url` for the same model).
            embedding_url: its service; None = in-process (bundled models only).
            embedding_dim: its dimension (default: the bundled model's, else required).
            query_prefix, passage_prefix: override the model's defaults.

        Raises:
            BaseNotFound, InvalidInput, ConfigError: as for :meth:`create_base`.
            EmbeddingModelUnavailable: the new model did not answer; the base is unchanged.
        """
        row = self._base_row(base)
        old = row.base_spec
        if embedding_model is None:
            changes = {k: v for k, v in (("embedding_url", embedding_url), ("embedding_dim", embedding_dim),
                                         ("query_prefix", query_prefix), ("passage_prefix", passage_prefix),
                                         ("embedding_api_key_env", embedding_api_key_env)) if v is not None}
            if embedding_url is not None:
                changes["embedding_protocol"] = embedding_protocol
            new = dataclasses.replace(old, **changes)
        else:
            if embedding_dim is None:
                if embedding_model not in LOCAL_EMBEDDING_MODELS:
                    raise InvalidInput(f"embedding_dim is required for the model {embedding_model!r}")
                embedding_dim = LOCAL_EMBEDDING_MODELS[embedding_model]
            new = dataclasses.replace(
                old, embedding_model=embedding_model, embedding_url=embedding_url, embedding_dim=embedding_dim,
                query_prefix=query_prefix, passage_prefix=passage_prefix, embedding_protocol=embedding_protocol,
                embedding_api_key_env=embedding_api_key_env,
            )
        from . import indexing
        return indexing.reembed(self.pool, row, new, self.embedder(new), batch=self.settings.embed_batch_chunks,
                                on_progress=on_progress)

    # -- notes and facts (SPEC F2, F11) -------------------------------------

    def add_note(self, base: str, title: str, text: str) -> int:
        """Add a note to `base` and return its id; it is searched like any document.

        The note is a Markdown document ``notes/<id>-<slug>.md`` of the source
        ``metis-<base>``: ``filters={"sources": ["metis-<base>"]}`` searches notes only.

        Raises:
            BaseNotFound: no such base.
            InvalidInput: empty or multi-line title, empty or oversized text.
        """
        row = self._base_row(base)
        from . import notes
        return notes.add_note(self.pool, self.settings, row, self._embedder_or_none(row), title, text)

    def notes(self, base: str, *, principals: "access.Principals" = None) -> list[Note]:
        """Return the notes of `base`, oldest first (with `principals`: those they may read).

        Raises:
            BaseNotFound: no such base.
        """
        from . import notes
        return self._read(lambda pool: notes.list_notes(pool, self._base_row(base, pool)), principals=principals)[0]

    def delete_note(self, base: str, note_id: int) -> None:
        """Delete a note of `base` with its chunks, vectors and terms.

        Raises:
            BaseNotFound: no such base.
            NotFound: the base has no note with this id.
        """
        from . import notes
        notes.delete_note(self.pool, self._base_row(base), note_id)

    def remember(
        self,
        base: str,
        text: str,
        key: str | None = None,
        supersedes: int | None = None,
        observed_at: "datetime | str | None" = None,
    ) -> int:
        """Store a fact in the memory base `base` and return its id (SPEC F11).

        A fact with the same `key` as a fact that holds, or naming one in
        `supersedes`, replaces it: the old one stays findable, marked replaced. In
        search results facts that hold come first (``holds`` true), then replaced ones.

        Args:
            key: what the fact is about (e.g. ``"ana/role"``).
            supersedes: id of the fact this one replaces (its key is inherited).
            observed_at: when it was true (datetime or ISO 8601; naive = UTC); default now.

        Raises:
            BaseNotFound: no such base.
            InvalidInput: not a memory base, empty text, unknown or already replaced `supersedes`.
        """
        row = self._base_row(base)
        from . import notes
        return notes.remember(self.pool, self.settings, row, self._embedder_or_none(row), text, key=key,
                              supersedes=supersedes, observed_at=observed_at)

    def facts(self, base: str, *, holding_only: bool = False, principals: "access.Principals" = None) -> list[Fact]:
        """Return the facts of `base` in the order they were observed (with `principals`: those they may read).

        Raises:
            BaseNotFound: no such base.
        """
        from . import notes
        return self._read(lambda pool: notes.list_facts(pool, self._base_row(base, pool),
                                                        holding_only=holding_only), principals=principals)[0]

    def reindex(self, base: str, *, only: Sequence[str] | None = None,
                on_source: "Callable[[documents.SourceInfo], None] | None" = None,
                **index_options: Any) -> list[IndexReport]:
        """Index every folder source of `base` again (``metis index --base B`` with no path); one report each.

        A source of which only single files were ever indexed reads those files again, not the
        rest of their folder (``sources.whole_folder``).

        A source whose folder is gone (or unreadable) is not read: its report has no counts and
        a warning naming the folder, and its documents are kept. `index_options` are those of
        :meth:`index` (``on_progress``, ``max_file_bytes``, ``batch_documents``, ...);
        `on_source` is called before each source is read; `only` keeps the sources of these names.

        Raises:
            BaseNotFound: no such base.
            InvalidInput: the base has no folder source (nothing was ever indexed from a folder).
        """
        from . import indexing
        return indexing.reindex(base, self.sources(base), only=only, on_source=on_source,
                                index_one=lambda paths, source: self.index(base, *paths, source=source,
                                                                           **index_options),
                                status=lambda: self.base(base).status)


def _source_access(readers: "Sequence[str] | str | None", front_matter_readers: bool | None) -> dict[str, Any] | None:
    """The readers options of :meth:`IndexingMethods.index` as :func:`metis_pg.storage.set_source_readers`
    takes them; None when both keep the sources' own.

    Raises:
        InvalidInput: a malformed group name, or a `front_matter_readers` that is not a boolean.
    """
    from .access import check_groups

    if readers is None and front_matter_readers is None:
        return None
    if front_matter_readers is not None and not isinstance(front_matter_readers, bool):
        raise InvalidInput(f"front_matter_readers must be true or false, not {front_matter_readers!r}")
    return {"readers": None if readers is None else list(check_groups(readers, what="reader")),
            "front_matter_readers": front_matter_readers}
