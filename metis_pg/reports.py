"""Typed results of what is not a search: an indexing run (:class:`IndexReport`, :class:`FailedDocument`),
a base listing (:class:`BaseInfo`), notes and facts (:class:`Note`, :class:`Fact`), a re-embedding
(:class:`ReembedReport`). A search's are in :mod:`metis_pg.results`, which re-exports these.

All are frozen dataclasses; ``to_dict()`` gives their JSON (the same as the CLI's ``--json`` and the HTTP
service).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["IndexReport", "FailedDocument", "BaseInfo", "Note", "Fact", "ReembedReport"]


@dataclass(frozen=True, slots=True)
class FailedDocument:
    """A file indexing skipped, and why (it names the file)."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class IndexReport:
    """What an indexing run did (SPEC F3).

    Counts are documents, except ``chunks`` (chunks written),
    ``chunks_embedded`` (vectors written) and ``vectors_reused`` (those of the
    vectors written whose embedding text already had one: copied, not embedded
    again, issue 24). ``chunks_without_vector`` counts the base's chunks lacking a vector after the
    run; ``chunks_refused`` those of them the embedding model refused, which later runs do not send
    again (issue 26): the base is ``waiting`` only while others remain. ``seconds`` is wall time.
    """

    base: str
    read: int = 0
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    deleted: int = 0
    failed: tuple[FailedDocument, ...] = ()
    chunks: int = 0
    chunks_embedded: int = 0
    vectors_reused: int = 0
    chunks_without_vector: int = 0
    chunks_refused: int = 0
    status: str = "ready"
    warnings: tuple[str, ...] = ()
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "read": self.read,
            "new": self.new,
            "changed": self.changed,
            "unchanged": self.unchanged,
            "deleted": self.deleted,
            "failed": [{"path": f.path, "reason": f.reason} for f in self.failed],
            "chunks": self.chunks,
            "chunks_embedded": self.chunks_embedded,
            "vectors_reused": self.vectors_reused,
            "chunks_without_vector": self.chunks_without_vector,
            "chunks_refused": self.chunks_refused,
            "status": self.status,
            "warnings": list(self.warnings),
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True, slots=True)
class BaseInfo:
    """A base, its spec and its health.

    ``status`` is ``indexing`` only while a live indexer works on the base;
    ``interrupted`` says the last indexing run did not finish (its process was
    killed): what it committed is searchable, and the next ``metis index`` finishes.
    ``vectors_reused`` counts the chunks whose vector is another chunk's of the same embedding
    text (embedded once, issue 24): chunks with a hashed vector minus distinct texts.
    ``watched``: a ``metis watch`` follows its folders now; ``caught_up_at``: when it last
    finished indexing what changed (ISO 8601), else None (:mod:`metis_pg.watch`).
    ``without_vector_by_reason`` splits ``chunks_without_vector`` by why (issue 26, migration 0018):
    ``refused`` (the embedding service refused the text: not sent again while the model and
    ``METIS_EMBED_MAX_CHARS`` stay the same), ``model_unavailable`` (the model did not answer:
    the next ``metis index`` tries again), ``not_embedded_yet`` (the rest: indexing goes on, or
    an interrupted run); ``chunks_cut``: chunks whose vector was made from their text cut to
    ``METIS_EMBED_MAX_CHARS``.
    """

    name: str
    kind: str
    status: str
    spec: dict[str, Any] = field(default_factory=dict)
    documents: int = 0
    chunks: int = 0
    chunks_without_vector: int = 0
    without_vector_by_reason: dict[str, int] = field(default_factory=dict)
    chunks_cut: int = 0
    vectors_reused: int = 0
    last_indexed_at: str | None = None
    interrupted: bool = False
    watched: bool = False
    caught_up_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "status": self.status,
            "spec": self.spec,
            "documents": self.documents,
            "chunks": self.chunks,
            "chunks_without_vector": self.chunks_without_vector,
            "without_vector_by_reason": dict(self.without_vector_by_reason),
            "chunks_cut": self.chunks_cut,
            "vectors_reused": self.vectors_reused,
            "last_indexed_at": self.last_indexed_at,
            "interrupted": self.interrupted,
            "watched": self.watched,
            "caught_up_at": self.caught_up_at,
        }


@dataclass(frozen=True, slots=True)
class Note:
    """A note of a base (SPEC F2): a Markdown document of the source ``metis-<base>``.

    Attributes:
        note_id: its id (``documents.document_id``); ``metis note delete BASE ID``.
        base: the base it belongs to.
        title: its title (the ``# Title`` heading of the document).
        path: its path in the source, ``notes/<id>-<slug>.md``.
        text: its text as stored (the chunks joined by blank lines; the title apart).
        created_at: when it was added (ISO 8601).
    """

    note_id: int
    base: str
    title: str
    path: str
    text: str
    created_at: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "note_id": self.note_id,
            "base": self.base,
            "title": self.title,
            "path": self.path,
            "text": self.text,
            "created_at": self.created_at,
        }


@dataclass(frozen=True, slots=True)
class Fact:
    """A fact of a memory base (SPEC F11).

    Attributes:
        fact_id: its id (``documents.document_id``).
        base: the memory base.
        text: what the fact says.
        key: what it is about (a newer fact with the same key replaces it), or None.
        observed_at: when it was true (ISO 8601).
        holds: True while no newer fact replaced it.
        superseded_by: the id of the fact that replaced it, else None.
        superseded_at: when it was replaced (the newer fact's ``observed_at``), else None.
    """

    fact_id: int
    base: str
    text: str
    key: str | None
    observed_at: str
    holds: bool
    superseded_by: int | None = None
    superseded_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "fact_id": self.fact_id,
            "base": self.base,
            "text": self.text,
            "key": self.key,
            "observed_at": self.observed_at,
            "holds": self.holds,
            "superseded_by": self.superseded_by,
            "superseded_at": self.superseded_at,
        }


@dataclass(frozen=True, slots=True)
class ReembedReport:
    """What ``metis reembed`` did (SPEC F3): new vectors built beside the old, then switched.

    Attributes:
        old_model, new_model: embedding fingerprints (``model:dim``) before and after.
        chunks_embedded: vectors of the new model written.
        vectors_deleted: vectors of other models deleted after the switch.
        seconds: wall time.
    """

    base: str
    old_model: str
    new_model: str
    chunks_embedded: int
    vectors_deleted: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "old_model": self.old_model,
            "new_model": self.new_model,
            "chunks_embedded": self.chunks_embedded,
            "vectors_deleted": self.vectors_deleted,
            "seconds": round(self.seconds, 3),
        }
