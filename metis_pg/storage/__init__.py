"""Storage: every statement that reads or writes metis's tables, one module per table family.

- :mod:`.bases`: bases and sources; rows carry their spec parsed once (``BaseRow.base_spec``).
- :mod:`.locks`: a base's write lock (per transaction) and indexer lock (per session).
- :mod:`.documents`: documents with their chunks, postings and vectors, written in ONE
  transaction after deleting their previous version (SPEC F3).
- :mod:`.postings`: posting blocks, block lengths, BM25 statistics; the block encoding is the
  pure :func:`~.postings.encode_columns` (numpy columns; :func:`~.postings.encode_blocks` gives
  the same rows as a dictionary).
- :mod:`.vectors`: ``embeddings``, the vectors missing, a base's switch of model.
- :mod:`.counts`: search counts (SPEC F20).
- :mod:`.maintenance`: ANALYZE and VACUUM of the tables autovacuum's rule says are due, at the end
  of a run that wrote (a CLI command's embedded server lives seconds, autovacuum looks once a minute).

Internal to metis_pg (the public interface is :class:`metis_pg.Metis`); the names below are what
the rest of the package (and the tests) use. SQL text comes from ``sql/`` (:mod:`metis_pg.sqlfiles`);
only one-line statements and the COPYs (which cannot be EXPLAINed) are written in Python.
"""

from typing import Any as _Any

from .bases import (
    BaseRow,
    base_names,
    base_not_found,
    create_base,
    drop_base,
    ensure_source,
    folder_sources,
    get_base,
    list_bases,
    list_bases_light,
    mark_tokenized,
    set_status,
    set_source_readers,
)
from .counts import count_search, record_search
from .locks import INDEXER_LOCK_SPACE, indexer_session, lock_base

#: The names of the modules that write documents, postings and vectors, imported at their first use
#: (:func:`__getattr__`): a search needs none of them, nor the chunker and readers they import
#: (``metis search``'s start-up, issue 25).
_LAZY = {
    "documents": ("DocumentMeta", "PendingDocument", "delete_document", "document_hashes", "new_document_id",
                  "write_document", "write_documents"),
    "postings": ("BLOCK_CHUNKS", "PostingColumns", "encode_batch", "encode_blocks"),
    "vectors": ("chunks_without_vector", "count_chunks_without_vector", "count_refused", "document_paths",
                "delete_other_vectors", "NOTE_REASONS", "note_model_unavailable", "note_vectors",
                "reusable_vectors", "switch_embedding", "text_hash", "vectors_of_texts", "write_vectors"),
    "maintenance": ("Maintenance", "TableDue", "flush_statistics", "maintain", "tables_due"),
}
_LAZY_MODULE = {name: module for module, names in _LAZY.items() for name in names}
__all__ = [
    "BaseRow", "DocumentMeta", "PendingDocument", "BLOCK_CHUNKS", "INDEXER_LOCK_SPACE",
    "create_base", "get_base", "list_bases", "list_bases_light", "drop_base", "set_status", "set_source_readers", "base_names",
    "base_not_found", "mark_tokenized", "ensure_source", "folder_sources",
    "document_hashes", "new_document_id", "write_document", "write_documents", "delete_document",
    "encode_blocks", "encode_batch", "PostingColumns",
    "chunks_without_vector", "count_chunks_without_vector", "document_paths", "write_vectors", "reusable_vectors",
    "switch_embedding", "delete_other_vectors", "text_hash", "vectors_of_texts",
    "NOTE_REASONS", "note_vectors", "note_model_unavailable", "count_refused",
    "indexer_session", "lock_base",
    "count_search", "record_search",
    "Maintenance", "TableDue", "flush_statistics", "maintain", "tables_due",
]


def __getattr__(name: str) -> _Any:
    from importlib import import_module

    if name in _LAZY:  # the module itself (``storage.documents``)
        return import_module(f"{__name__}.{name}")
    module = _LAZY_MODULE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # found directly from now on
    return value
