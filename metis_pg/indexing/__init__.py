"""Indexing: one pipeline for folders, files, notes and facts (SPEC F2-F4, F11, F14).

ensure base (``Metis.index``, before it calls :func:`index`) → read → chunk → tokenize → write
words → embed vectors:

- :mod:`.sources`: the files a folder gives (the walk, links, nesting of sources), their hashes.
- :mod:`.pipeline`: a run (:func:`index`, :func:`index_paths`): phase 1 reads, chunks, tokenizes
  and writes the words of every new or changed document in batches; phase 2 embeds. Notes and
  facts use the same steps (:func:`~.reading.own_document`, :func:`~.pipeline.embed_own`).
- :mod:`.reading`: phase 1 for one document (read → chunk → tokenize): :func:`~.reading.read_file`
  for a file of a source, :func:`~.reading.own_document` for a note or a fact.
- :mod:`.run`: a run's tally and the batches (one transaction each) its documents are written in.
- :mod:`.vectors`: the one embedding loop (:func:`embed_batches`) of phase 2, re-embedding
  (:func:`reembed`) and notes.

Internal to metis_pg: :class:`metis_pg.Metis` (``index``, ``reindex``, ``reembed``, ``add_note``,
``remember``) is the public interface.
"""

from .pipeline import Progress, embed_own, index, index_paths, reindex
from .reading import own_document, tokenize
from .sources import walk_source
from .vectors import EmbedProgress, embed_batches, embed_missing, reembed

__all__ = [
    "Progress", "EmbedProgress", "index", "index_paths", "reindex", "tokenize", "own_document", "embed_own",
    "walk_source", "embed_batches", "embed_missing", "reembed",
]
