"""Search latency of metis_pg on a synthetic base of N chunks (and one base of ten), beside numpy brute force.

One run prints, and writes with ``--json PATH``, for a base of ``--chunks N``
chunks (default 100,000; 384-d): p50/p95 (ms) of the dense leg alone, the
keyword leg alone, the fused statement (``sql/search/hybrid.sql``, both legs
and RRF) and the fused statement with a ``path_prefix`` filter keeping 1% of
the documents, and with a ``tags_any`` filter keeping another 1%, and two broad filters: an
``exclude_prefixes`` of that folder (99% kept) and a ``kinds`` every document has (all kept),
all through :func:`metis_pg.retrieval.run_search` (top_k 10,
the question's terms as ``mark_terms``, as the search pipeline gives them);
numpy brute-force cosine over the same vectors in the same run; indexing
throughput without model time through the real write path
(:func:`metis_pg.storage.write_documents`); and the database size per 1,000
chunks. With ``--bases 10`` it then loads nine more bases of N chunks into the
same database (10 N chunks in all) and measures the same figures for the first
base, plus the fused statement over three of the bases.

JSON keys (top level: the single base; under ``"bases_10"``: one base of ten)::

    chunks, dense_p50_ms, dense_p95_ms, keyword_p50_ms, keyword_p95_ms,
    fused_p50_ms, fused_p95_ms, filtered_p50_ms, filtered_p95_ms, tagged_p50_ms, tagged_p95_ms,
    broad_p50_ms, broad_p95_ms (all but the 1% of path_prefix), every_p50_ms, every_p95_ms (kinds=["md"]),
    as_eng_p50_ms, as_eng_p95_ms (the fused statement on behalf of ``eng``: row-level security,
    1% of the documents readable by ``hr`` only),
    numpy_p50_ms, indexing_chunks_per_s, mb_per_1k_chunks
    bases_10 only: three_bases_p50_ms, three_bases_p95_ms

plus ``load_avg`` (``os.getloadavg()`` at start and end), ``git_commit``, the
command, the machine and the details of every figure.

The corpus is made up and written through ``storage.write_documents`` (the
indexer's own write path: tokenizer, COPY, BM25 statistics, whatever the schema
is), ``--load-batch-chunks`` chunks (2,000) per transaction, vectors given
precomputed, so the benchmark never writes a storage table itself:

- a vocabulary of 50,000 pronounceable letter-only words (shortest = most
  common), so :func:`metis_pg.tokenizer.terms` of a chunk is its words;
- ``--corpus zipf`` (default, the corpus of the earlier figures): chunks of 150
  words drawn from a Zipf law, p(rank r) = 1 / (r * H), over the vocabulary
  (the most common word is ~9% of all words, as "the" is in English);
  documents of 5-15 chunks (10 on average). Every chunk has the same length and
  most words occur once in it, so many BM25 scores tie;
- ``--corpus topics``: each document has 1-3 topic words drawn (Zipf) from the
  mid/rare band of ranks 1,000-50,000 that recur inside it (bursty, as in real
  documents: in ~65% of its chunks, 1 + Poisson(1.5) times), over Zipf
  background words; chunk lengths log-normal (median 110 words, 40-250);
  documents of 1-40 chunks (geometric, mean ~9). BM25 scores then spread;
- documents under 100 top folders ``area-00/`` .. ``area-99/``, so
  ``path_prefix="area-07/"`` keeps 1% of the documents; each document has one of
  100 tags ``topic-00`` .. ``topic-99`` (across the folders), so
  ``tags_any=["topic-07"]`` keeps another 1% (the tag-filter case, issue 21);
- random unit vectors of 384 dimensions, rounded to float16 (what ``halfvec``
  stores); numpy searches the same float16 values as a float32 matrix.

After the load, every table with a ``base_id`` column (read from the catalog,
so a new table is counted without editing this file) is VACUUM (ANALYZE)d and
read once, so statistics, hint bits and the visibility map are as in a steady
state. The size per 1,000 chunks is the sum of ``pg_total_relation_size`` of
those tables (partitions included) over the chunks in the database.

Queries: for ``zipf``, 2-4 distinct words drawn from the same Zipf law (most
queries mix a very common word with rarer ones, as a typed question does: no
stop words are removed, SPEC F6). For ``topics``, one topic word of a random
document (two, a quarter of the time) with 1-3 common words (Zipf over the
2,000 most common), shuffled. Each with a random unit vector. Each kind of
query is warmed up first, then timed on the client around ``run_search``
(statement + fetch); the four cases take turns query by query and stop
together after 4 x ``--case-budget-s`` seconds (at least 10 queries).

Usage::

    python benchmarks/search_latency.py --json out.json                 # 100k chunks, throwaway server
    python benchmarks/search_latency.py --chunks 5000 --bases 3 --queries 20 --case-budget-s 5   # quick look
    python benchmarks/search_latency.py --bases 10 --json out.json      # + one base of ten (1M chunks)
    python benchmarks/search_latency.py --corpus topics                 # bursty topic words, varied lengths
    python benchmarks/search_latency.py --dsn postgresql://...          # an existing database
    python benchmarks/search_latency.py --storage-compare               # + vector/halfvec x storage at 100k
    python benchmarks/search_latency.py --baseline-statement old_hybrid.sql --baseline-after old_marks.sql
                                       # + case fused_baseline: another statement (and one run after it),
                                       # and broad_baseline, every_baseline: it with the broad filters

With no ``--dsn`` the embedded PostgreSQL starts in a temporary folder that is
deleted at the end. With ``--dsn`` the benchmark works in its own bases
(``bench-<random>``), dropped at the end; sizes then include other data.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
import atexit
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

try:
    import metis_pg
except ImportError:  # a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import metis_pg

from psycopg import sql

from metis_pg.config import Settings
from metis_pg import access, db, migrate, sqlfiles, storage
from metis_pg.chunking import Chunk
from metis_pg.config import BaseSpec
from metis_pg.retrieval import Filters, fuse_bases, leg_limit, run_search
from metis_pg.tokenizer import terms as text_terms

try:  # the indexer's batch size: the indexing figure writes as `metis index` does
    from metis_pg.indexing.run import BATCH_CHUNKS as INDEX_BATCH_CHUNKS
except ImportError:  # pragma: no cover - renamed
    INDEX_BATCH_CHUNKS = 500
try:  # ... and its most documents per batch (`metis index --batch`), whichever is reached first
    import inspect

    from metis_pg.indexing.pipeline import index_paths as _index_paths
    INDEX_BATCH_DOCUMENTS = inspect.signature(_index_paths).parameters["batch_documents"].default
except (ImportError, KeyError):  # pragma: no cover - renamed
    INDEX_BATCH_DOCUMENTS = 100

DIM = 384
VOCABULARY_SIZE = 50_000
WORDS_PER_CHUNK = 150  # zipf corpus
TOP_K = 10
NUMPY_TOP = 50  # what the dense leg keeps: leg_limit(10)
FOLDERS = 100  # top folders of the documents: one prefix keeps 1%
FILTER_PREFIX = "area-07/"
#: Each document has one tag of 100 (``topic-00`` .. ``topic-99``), not aligned with its folder:
#: ``tags_any=[FILTER_TAG]`` keeps another 1% of the documents (issue 21).
FILTER_TAG = "topic-07"
#: Broad filters: all but the documents of FILTER_PREFIX (99% kept), and every document (the kind all have).
BROAD_FILTER = Filters(exclude_prefixes=(FILTER_PREFIX,))
EVERY_FILTER = Filters(kinds=("md",))
#: Documents whose number is this modulo FOLDERS (1% of them) are readable by ``hr`` only (their
#: front matter ``readers: [hr]``, which the bench source allows): the ``fused_as_eng`` case
#: searches on behalf of ``eng`` (issue 21, row-level security and the readable documents kept).
HR_ONLY = 42
WARMUP_QUERIES = 5
INDEXING_CHUNKS = 5_000
LOAD_BATCH_CHUNKS = 2_000
THREE = 3  # bases searched together in the many-bases case
# topics corpus
TOPIC_BAND = (1_000, VOCABULARY_SIZE)  # ranks (0-based, end excluded) topic words are drawn from
TOPICS_PER_DOCUMENT = (1, 3)
TOPIC_IN_CHUNK = 0.65  # chance a topic word of the document occurs in one of its chunks
TOPIC_EXTRA_MEAN = 1.5  # occurrences beyond the first: Poisson
CHUNK_WORDS_MEDIAN, CHUNK_WORDS_SIGMA, CHUNK_WORDS_RANGE = 110, 0.5, (40, 250)
COMMON_RANKS = 2_000  # query words that are not topics: Zipf over the most common


# --------------------------------------------------------------------------- corpus


def vocabulary(size: int = VOCABULARY_SIZE) -> list[str]:
    """Return `size` distinct letter-only words, shortest first (rank 1 = most common)."""
    consonants = "bcdfghjklmnprstvwz"
    vowels = "aeiou"
    syllables = [c + v for c in consonants for v in vowels]  # 90
    words: list[str] = []
    seen: set[str] = set()
    layer = [""]
    while len(words) < size:
        layer = [w + s for w in layer for s in syllables]
        for stem in layer:
            for word in (stem, stem + "n", stem + "r", stem + "s"):
                if word not in seen and len(word) >= 2:
                    seen.add(word)
                    words.append(word)
    words.sort(key=len)  # stable: each length keeps its order
    return words[:size]


def zipf_probabilities(size: int = VOCABULARY_SIZE, exponent: float = 1.0) -> np.ndarray:
    """Return p(rank r) = r**-exponent / sum, ranks 1..size, float64."""
    weights = 1.0 / np.arange(1, size + 1, dtype=np.float64) ** exponent
    return weights / weights.sum()


def draw(rng: np.random.Generator, cdf: np.ndarray, size) -> np.ndarray:
    """Return word ranks (0-based, int64) drawn from the law whose cumulative sums are `cdf`."""
    return np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), len(cdf) - 1).astype(np.int64)


def unit_vectors(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    """Return (n, dim) random unit vectors rounded to float16, as float32."""
    v = rng.standard_normal((n, dim), dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v.astype(np.float16).astype(np.float32)


@dataclass
class Words:
    """The vocabulary and the laws words are drawn from (cumulative sums, for :func:`draw`)."""

    words: list[str]
    cdf: np.ndarray  # Zipf over the whole vocabulary
    topic_cdf: np.ndarray  # Zipf over TOPIC_BAND (index 0 = rank TOPIC_BAND[0])
    common_cdf: np.ndarray  # Zipf over the COMMON_RANKS most common

    @classmethod
    def make(cls) -> Words:
        """Return the benchmark's vocabulary and laws."""
        p = zipf_probabilities()
        lo, hi = TOPIC_BAND
        band = p[lo:hi] / p[lo:hi].sum()
        common = p[:COMMON_RANKS] / p[:COMMON_RANKS].sum()
        return cls(vocabulary(), np.cumsum(p), np.cumsum(band), np.cumsum(common))


@dataclass
class Doc:
    """A made-up document: its number in the base, its chunks' word ranks, its topic words' ranks."""

    number: int
    chunks: list[np.ndarray]  # one int64 array of word ranks per chunk
    topics: tuple[int, ...] = ()


def zipf_documents(rng: np.random.Generator, w: Words, n_chunks: int) -> Iterator[Doc]:
    """Yield documents of 5-15 chunks of WORDS_PER_CHUNK Zipf words, `n_chunks` chunks in all."""
    made = number = 0
    while made < n_chunks:
        size = min(int(rng.integers(5, 16)), n_chunks - made)
        ranks = draw(rng, w.cdf, (size, WORDS_PER_CHUNK))
        yield Doc(number, list(ranks))
        made += size
        number += 1


def topic_documents(rng: np.random.Generator, w: Words, n_chunks: int) -> Iterator[Doc]:
    """Yield documents with bursty topic words and log-normal chunk lengths, `n_chunks` chunks in all.

    Each document: 1-40 chunks (geometric, mean ~9); 1-3 topic words drawn by Zipf from
    TOPIC_BAND; each chunk has log-normal length (words, median CHUNK_WORDS_MEDIAN, clipped
    to CHUNK_WORDS_RANGE) of Zipf background words, in which each topic word of the document,
    with chance TOPIC_IN_CHUNK, replaces 1 + Poisson(TOPIC_EXTRA_MEAN) random positions.
    """
    made = number = 0
    lo_words, hi_words = CHUNK_WORDS_RANGE
    while made < n_chunks:
        size = min(int(min(40, rng.geometric(1 / 9))), n_chunks - made)
        n_topics = int(rng.integers(TOPICS_PER_DOCUMENT[0], TOPICS_PER_DOCUMENT[1] + 1))
        topics: list[int] = []
        while len(topics) < n_topics:
            t = TOPIC_BAND[0] + int(draw(rng, w.topic_cdf, 1)[0])
            if t not in topics:
                topics.append(t)
        lengths = np.clip(np.round(rng.lognormal(np.log(CHUNK_WORDS_MEDIAN), CHUNK_WORDS_SIGMA, size)),
                          lo_words, hi_words).astype(int)
        chunks = []
        for length in lengths.tolist():
            ranks = draw(rng, w.cdf, length)
            for t in topics:
                if rng.random() < TOPIC_IN_CHUNK:
                    count = min(length, 1 + int(rng.poisson(TOPIC_EXTRA_MEAN)))
                    ranks[rng.choice(length, count, replace=False)] = t
            chunks.append(ranks)
        yield Doc(number, chunks, tuple(topics))
        made += size
        number += 1


CORPORA: dict[str, Callable[[np.random.Generator, Words, int], Iterator[Doc]]] = {
    "zipf": zipf_documents, "topics": topic_documents,
}


@dataclass
class Corpus:
    """A benchmark base and what has been written into it."""

    name: str
    base_id: int
    source_id: int
    model: str
    vectors: np.ndarray  # (n, dim) float32, the halfvec values (empty unless kept)
    chunk_ids: np.ndarray  # (n,) int64, chunk_id of each row of vectors
    chunks: int = 0
    documents: int = 0
    topics: list[tuple[int, ...]] = field(default_factory=list)  # per document (topics corpus)


def vectors_copy_binary(columns: Sequence[tuple[str, np.ndarray]], vectors: np.ndarray, element: str) -> bytes:
    """Return a binary COPY stream of rows: the given int/text columns, then a pgvector value.

    Args:
        columns: (kind, values) per leading column; kind ``"int4"``, ``"int8"`` or ``"text"`` (one
            value for every row, as a numpy bytes array of equal lengths).
        vectors: (n, dim) values; written as ``halfvec`` (`element` ``">f2"``) or ``vector`` (``">f4"``):
            int16 dim, int16 0, then the big-endian floats (pgvector's binary format).
    """
    n, dim = vectors.shape
    fields = [("nfields", ">i2")]
    for i, (kind, values) in enumerate(columns):
        width = {"int4": ">i4", "int8": ">i8"}.get(kind) or f"S{values.dtype.itemsize}"
        fields += [(f"len{i}", ">i4"), (f"col{i}", width)]
    fields += [("vlen", ">i4"), ("dim", ">i2"), ("unused", ">i2"), ("values", element, (dim,))]
    rows = np.zeros(n, dtype=np.dtype(fields))
    rows["nfields"] = len(columns) + 1
    for i, (_, values) in enumerate(columns):
        rows[f"len{i}"] = rows.dtype[f"col{i}"].itemsize
        rows[f"col{i}"] = values
    rows["vlen"] = 4 + dim * np.dtype(element).itemsize
    rows["dim"] = dim
    rows["values"] = vectors
    header = b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
    return header + rows.tobytes() + (-1).to_bytes(2, "big", signed=True)


def create_corpus(pool, spec: BaseSpec, prefix: str = "bench") -> Corpus:
    """Create an empty base ``<prefix>-<random>`` with one source; return its Corpus."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with pool.connection() as conn:
        base = storage.create_base(conn, name, "documents", spec.to_json())
        source_id = storage.ensure_source(conn, base.base_id, "bench", None)
        storage.set_source_readers(conn, source_id, readers=None, front_matter_readers=True)
    return Corpus(name, base.base_id, source_id, spec.fingerprint, np.empty((0, DIM), np.float32),
                  np.empty(0, np.int64))


def pending_document(doc: Doc, w: Words, vectors: np.ndarray) -> storage.PendingDocument:
    """Return `doc` as write_documents takes it: chunk texts are its words; no title or headings.

    Without a title or headings a chunk's BM25 terms are exactly its words (BM25 also reads a
    chunk's title and headings), so the keyword figures depend on the corpus alone.
    """
    words = w.words
    chunks, offset, line = [], 0, 1
    for ordinal, ranks in enumerate(doc.chunks):
        text = " ".join([words[r] for r in ranks.tolist()])
        chunks.append(Chunk(ordinal=ordinal, text=text, title="", headings=(), page=None, line=line,
                            char_start=offset, char_end=offset + len(text), line_end=line))
        offset += len(text) + 2
        line += 2
    meta = storage.DocumentMeta(f"area-{doc.number % FOLDERS:02d}/doc-{doc.number:07d}.md",
                                f"Document {doc.number}", "md", f"h{doc.number:x}", offset,
                                tags=(f"topic-{(37 * doc.number + doc.number // FOLDERS) % FOLDERS:02d}", "bench"),
                                extra={"readers": ["hr"]} if doc.number % FOLDERS == HR_ONLY else {})
    return storage.PendingDocument(meta, chunks, list(vectors))


def load_base(pool, corpus: Corpus, n_chunks: int, w: Words, kind: str, rng: np.random.Generator, *,
              batch_chunks: int = LOAD_BATCH_CHUNKS, keep_vectors: bool = True, label: str = "") -> dict[str, float]:
    """Write `n_chunks` made-up chunks into the base through ``storage.write_documents``.

    Documents are gathered into batches of at least `batch_chunks` chunks, one
    write_documents call (one transaction) each; vectors are precomputed random unit
    vectors. With `keep_vectors` the vectors and their chunk ids are kept in `corpus`
    (read back after each batch, in write order) for numpy.

    Returns:
        ``{"chunks", "documents", "write_s"`` (seconds inside write_documents),
        ``"generate_s"`` (making texts and vectors), ``"load_chunks_per_s"`` (chunks / write_s)``}``.
    """
    write_s = generate_s = 0.0
    kept_vectors, kept_ids = [corpus.vectors], [corpus.chunk_ids]
    documents = CORPORA[kind](rng, w, n_chunks)
    first_number = corpus.documents
    done = 0
    next_report = time.perf_counter() + 30
    exhausted = False
    while not exhausted:
        t0 = time.perf_counter()
        batch: list[storage.PendingDocument] = []
        batch_vectors = []
        size = 0
        while size < batch_chunks:
            doc = next(documents, None)
            if doc is None:
                exhausted = True
                break
            doc.number += first_number
            vectors = unit_vectors(rng, len(doc.chunks))
            batch.append(pending_document(doc, w, vectors))
            batch_vectors.append(vectors)
            corpus.topics.append(doc.topics)
            size += len(doc.chunks)
        if not batch:
            break
        t1 = time.perf_counter()
        with pool.connection() as conn:
            ids = storage.write_documents(conn, base_id=corpus.base_id, source_id=corpus.source_id,
                                          documents=batch, model=corpus.model)
        t2 = time.perf_counter()
        generate_s += t1 - t0
        write_s += t2 - t1
        corpus.documents += len(batch)
        corpus.chunks += size
        done += size
        if keep_vectors:
            with pool.connection() as conn:
                rows = conn.execute("SELECT document_id, ordinal, chunk_id FROM chunks"
                                    " WHERE document_id = ANY(%s::bigint[])", (ids,)).fetchall()
            position = {d: i for i, d in enumerate(ids)}  # the order the batch was written in
            rows.sort(key=lambda r: (position[r[0]], r[1]))
            kept_ids.append(np.array([r[2] for r in rows], dtype=np.int64))
            kept_vectors.append(np.vstack(batch_vectors))
        if time.perf_counter() > next_report:
            next_report = time.perf_counter() + 30
            print(f"[{label}{done:,}/{n_chunks:,} chunks, {done / write_s:.0f} chunks/s in write_documents]",
                  file=sys.stderr)
    if keep_vectors:
        corpus.vectors = np.vstack(kept_vectors)
        corpus.chunk_ids = np.concatenate(kept_ids)
        assert len(corpus.vectors) == len(corpus.chunk_ids) == corpus.chunks, "chunk ids read back do not match"
    return {"chunks": done, "documents": corpus.documents, "write_s": write_s, "generate_s": generate_s,
            "load_chunks_per_s": done / write_s if write_s else 0.0}


def check_tokenizer_agrees(w: Words) -> None:
    """Fail unless the tokenizer gives the words back: query words are then the BM25 terms written."""
    sample = w.words[:200] + w.words[-200:]
    assert text_terms(" ".join(sample)) == sample, "synthetic words are not single BM25 terms"


# --------------------------------------------------------------------------- the tables a base uses


BASE_TABLES_SQL = """
SELECT c.oid::regclass::text
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'base_id' AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition AND n.nspname = ANY (current_schemas(false))
ORDER BY 1
"""

# A partitioned table has no storage of its own: its size is its partitions' (pg_partition_tree
# lists a plain table as nothing, hence the coalesce with the table's own size).
TABLE_SIZE_SQL = """
SELECT coalesce((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree(%(t)s::regclass) WHERE isleaf),
                pg_total_relation_size(%(t)s::regclass))::bigint
"""


# Each relation's own bytes: a table's main fork (with its free space and visibility maps), its
# TOAST table (with the TOAST index) and each of its indexes; partitions under their parent.
RELATION_SIZES_SQL = """
WITH leaves AS (
    SELECT %(t)s::regclass AS parent, p.relid
    FROM pg_partition_tree(%(t)s::regclass) AS p WHERE p.isleaf
    UNION ALL
    SELECT %(t)s::regclass, %(t)s::regclass WHERE NOT EXISTS (SELECT 1 FROM pg_partition_tree(%(t)s::regclass) WHERE isleaf)
)
SELECT parent::text || ' (table)', sum(pg_table_size(relid) - coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0))
FROM leaves JOIN pg_class AS c ON c.oid = relid GROUP BY parent
UNION ALL
SELECT parent::text || ' (TOAST)', sum(coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0))
FROM leaves JOIN pg_class AS c ON c.oid = relid GROUP BY parent
UNION ALL
SELECT i.indexrelid::regclass::text, pg_relation_size(i.indexrelid)
FROM leaves JOIN pg_index AS i ON i.indrelid = relid
"""


def base_tables(conn) -> list[str]:
    """Return every table (partitioned tables as one; not views) with a ``base_id`` column, from the catalog."""
    return [r[0] for r in conn.execute(BASE_TABLES_SQL)]


def vacuum_analyze(dsn: str) -> list[str]:
    """VACUUM (ANALYZE) every table of :func:`base_tables`, then read each once; return their names.

    VACUUM sets statistics, hint bits and the visibility map as in a steady state; the
    read puts the tables in the OS page cache, so the first queries timed do not pay
    for the first reads.
    """
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET statement_timeout = 0")
        tables = base_tables(conn)
        for table in tables:
            conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.SQL(table)))
        for table in tables:
            conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(table)))
    return tables


def table_sizes(conn) -> dict[str, int]:
    """Return ``{table: bytes}`` (with indexes and TOAST; a partitioned table: its partitions summed)
    for every table of :func:`base_tables`."""
    return {t: conn.execute(TABLE_SIZE_SQL, {"t": t}).fetchone()[0] for t in base_tables(conn)}


def relation_sizes(conn) -> dict[str, int]:
    """Return ``{relation: bytes}`` for every table of :func:`base_tables`, split: ``"<table> (table)"``
    (main fork, free space and visibility maps), ``"<table> (TOAST)"`` (with its index) and each index;
    they add up to :func:`table_sizes`."""
    return {name: int(size) for t in base_tables(conn)
            for name, size in conn.execute(RELATION_SIZES_SQL, {"t": t}).fetchall()}


def database_size(pool) -> dict:
    """Return the size of every table of :func:`base_tables` (:func:`table_sizes`) and their total per chunk.

    Returns:
        ``{"tables": {name: bytes}, "relations": {name: bytes}`` (:func:`relation_sizes`)``,
        "total_bytes", "chunks_in_database", "mb_per_1k_chunks"}``: the total over the chunks of every
        base in the database, in MB (10**6 bytes) per 1,000 chunks.
    """
    with pool.connection() as conn:
        tables = table_sizes(conn)
        relations = relation_sizes(conn)
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    total = sum(tables.values())
    return {"tables": tables, "relations": relations, "total_bytes": total, "chunks_in_database": chunks,
            "mb_per_1k_chunks": total / 1e6 * 1000 / max(chunks, 1)}


# --------------------------------------------------------------------------- queries and timing


@dataclass(frozen=True)
class Query:
    terms: list[str]
    vector: np.ndarray  # (dim,) float32, unit


def zipf_queries(rng: np.random.Generator, n: int, w: Words, corpus: Corpus) -> list[Query]:
    """Return `n` queries: 2-4 distinct Zipf-drawn words and a random unit vector each."""
    vectors = unit_vectors(rng, n)
    queries = []
    for i in range(n):
        count = int(rng.integers(2, 5))
        ids: list[int] = []
        while len(ids) < count:
            r = int(draw(rng, w.cdf, 1)[0])
            if r not in ids:
                ids.append(r)
        queries.append(Query([w.words[r] for r in ids], vectors[i]))
    return queries


def topic_queries(rng: np.random.Generator, n: int, w: Words, corpus: Corpus) -> list[Query]:
    """Return `n` queries: a topic word of a random document of `corpus` (two, a quarter of the
    time, when it has two) with 1-3 distinct common words, shuffled; and a random unit vector."""
    vectors = unit_vectors(rng, n)
    with_topics = [t for t in corpus.topics if t]
    queries = []
    for i in range(n):
        topics = list(with_topics[int(rng.integers(len(with_topics)))])
        rng.shuffle(topics)
        ids = topics[:2] if len(topics) > 1 and rng.random() < 0.25 else topics[:1]
        count = len(ids) + int(rng.integers(1, 4))
        while len(ids) < count:
            r = int(draw(rng, w.common_cdf, 1)[0])
            if r not in ids:
                ids.append(r)
        rng.shuffle(ids)
        queries.append(Query([w.words[r] for r in ids], vectors[i]))
    return queries


QUERIES: dict[str, Callable[[np.random.Generator, int, Words, Corpus], list[Query]]] = {
    "zipf": zipf_queries, "topics": topic_queries,
}


def percentiles(samples_ms: Sequence[float]) -> dict[str, float]:
    """Return p50 and p95 (ms) of the samples (linear interpolation between order statistics)."""
    a = np.asarray(samples_ms)
    return {"p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95)), "n": len(a)}


def time_calls(fn: Callable[[Query], object], queries: Sequence[Query], budget_s: float = float("inf")
               ) -> dict[str, float]:
    """Warm up on the first queries, then time `fn` once per query; return percentiles.

    Timing stops early once `budget_s` seconds are spent (at least 10 queries are timed):
    the result's ``n`` says how many were.
    """
    for q in queries[:WARMUP_QUERIES]:
        fn(q)
    samples = []
    started = time.perf_counter()
    for q in queries:
        t0 = time.perf_counter()
        fn(q)
        samples.append((time.perf_counter() - t0) * 1000.0)
        if len(samples) >= 10 and time.perf_counter() - started > budget_s:
            break
    return percentiles(samples)


#: Text of another fused statement to time beside sql/search/hybrid.sql (``--baseline-statement``).
BASELINE_STATEMENT: str | None = None
#: A statement run after the baseline's on the same connection (``--baseline-after``), with
#: ``base_ids`` and ``terms``: what the search pipeline ran besides it then.
BASELINE_AFTER: str | None = None


def search_cases(pool, base_ids: Sequence[int], model: str, queries: Sequence[Query], budget_s: float,
                 *, three_base_ids: Sequence[int] = ()) -> dict:
    """Time the dense leg, the keyword leg, the fused statement and the filtered fused statement
    on `base_ids`; with `three_base_ids`, also the fused statement over those bases ("three_bases").

    The cases take turns query by query (each query runs in all of them before the next),
    so every case is timed on the same queries and the machine's ups and downs fall on
    all of them alike. Timing stops once the cases together have spent len(cases) x
    `budget_s` seconds (at least 10 queries): per-query cost varies a hundredfold with the
    frequency of the query's words, so cases cut at different queries would not compare.

    Returns:
        ``{case: {"p50_ms", "p95_ms", "n"}}``, ``"fused_parts_p50_ms"`` (when "fused" is timed) and
        ``"as_eng_parts_p50_ms"`` (the same of "fused_as_eng"):
        the p50 of each part of the fused statement, as stamped inside it.
    """

    # Reads on behalf of a group get connections of their own, as in a service where every search
    # comes with a token: PostgreSQL plans a cached statement that row-level security applies to
    # (bm25_top_k's) again when the connection's role changes, so alternating the operator and a
    # group on one connection would time that planning too (docs/performance.md).
    behalf_pool = db.Pool(pool.conninfo, min_size=1, max_size=2, settings=pool.settings)

    def run(q: Query, *, dense: bool, keyword: bool, filters: Filters | None = None, bases: Sequence[int] = base_ids,
            statement: str | None = None, principals: Sequence[str] | None = None):
        with (pool if principals is None else behalf_pool).connection() as conn:
            if principals is not None:  # as metis_pg.access.OnBehalf does: under row-level security
                access.begin_on_behalf(conn, principals)
            # mark_terms: the question's terms, as the search pipeline gives them in every mode (the
            # statistics of its snippets' marks come with the rows); not to a --baseline-statement,
            # whose snippet statistics --baseline-after reads, as the pipeline then did.
            found = run_search(
                conn, base_ids=list(bases), model=model,
                query_embedding=q.vector if dense else None, terms=q.terms if keyword else [],
                top_k=TOP_K, filters=filters or Filters(), statement=statement,
                mark_terms=q.terms if statement is None else (),
            )
            if statement is not None and BASELINE_AFTER:
                conn.execute(BASELINE_AFTER, {"base_ids": list(bases), "terms": list(q.terms)}).fetchall()
            return found

    executor = ThreadPoolExecutor(max_workers=3)

    def per_base(q: Query, bases: Sequence[int]) -> tuple:
        every_row = 2 * leg_limit(TOP_K)

        def one(b: int):
            with pool.connection() as conn:
                return run_search(conn, base_ids=[b], model=model, query_embedding=q.vector, terms=q.terms,
                                  top_k=every_row, legs_top_k=TOP_K, filters=Filters(), mark_terms=q.terms)

        answers = list(executor.map(one, bases))
        fused = fuse_bases([a for a, _ in answers], legs_top_k=TOP_K, top_k=TOP_K, rrf_k=60,
                           dense_weight=1.0, keyword_weight=1.0)
        return fused, None

    every: dict[str, Callable[[Query], tuple]] = {
        "dense": lambda q: run(q, dense=True, keyword=False),
        "keyword": lambda q: run(q, dense=False, keyword=True),
        "fused": lambda q: run(q, dense=True, keyword=True),
        "fused_filtered": lambda q: run(q, dense=True, keyword=True, filters=Filters(path_prefix=FILTER_PREFIX)),
        "fused_tagged": lambda q: run(q, dense=True, keyword=True, filters=Filters(tags_any=(FILTER_TAG,))),
        # Broad filters: all but the 1% of the folder FILTER_PREFIX, and every document (its kind).
        "fused_broad": lambda q: run(q, dense=True, keyword=True, filters=BROAD_FILTER),
        "fused_every": lambda q: run(q, dense=True, keyword=True, filters=EVERY_FILTER),
        # On behalf of eng, who may not read the 1% of documents hr may (issue 21).
        "fused_as_eng": lambda q: run(q, dense=True, keyword=True, principals=["eng"]),
    }
    if three_base_ids:
        # One statement over the three (before issue 22), what the search pipeline runs now (one
        # statement per base at once, fused as the one statement would: SearchPipeline._search_group),
        # and each base alone (the bound: the sum of the three bases' own p95).
        every["three_bases"] = lambda q: run(q, dense=True, keyword=True, bases=three_base_ids)
        every["three_bases_per_base"] = lambda q: per_base(q, three_base_ids)
        # Each leg of the one statement alone: where its time goes.
        every["three_bases_dense"] = lambda q: run(q, dense=True, keyword=False, bases=three_base_ids)
        every["three_bases_keyword"] = lambda q: run(q, dense=False, keyword=True, bases=three_base_ids)
        for i, base_id in enumerate(three_base_ids):
            every[f"base_{i + 1}_of_3"] = lambda q, b=base_id: run(q, dense=True, keyword=True, bases=[b])
    if BASELINE_STATEMENT:
        # Another version of the fused statement, timed on the same queries in turn with the others.
        every["fused_baseline"] = lambda q: run(q, dense=True, keyword=True, statement=BASELINE_STATEMENT)
        every["broad_baseline"] = lambda q: run(q, dense=True, keyword=True, filters=BROAD_FILTER,
                                                statement=BASELINE_STATEMENT)
        every["every_baseline"] = lambda q: run(q, dense=True, keyword=True, filters=EVERY_FILTER,
                                                statement=BASELINE_STATEMENT)
    chosen = every
    for q in queries[:WARMUP_QUERIES]:
        for fn in chosen.values():
            fn(q)
    samples: dict[str, list[float]] = {name: [] for name in chosen}
    legs, legs_as_eng = [], []
    started = time.perf_counter()
    for i, q in enumerate(queries):
        for name, fn in chosen.items():
            t0 = time.perf_counter()
            _, times = fn(q)
            samples[name].append((time.perf_counter() - t0) * 1000.0)
            if name == "fused":
                legs.append(times)  # each leg's end, stamped inside the statement
            elif name == "fused_as_eng":
                legs_as_eng.append(times)
        if i + 1 >= 10 and time.perf_counter() - started > len(chosen) * budget_s:
            break
    results: dict = {name: percentiles(s) for name, s in samples.items()}
    for key, stamped in (("fused_parts_p50_ms", legs), ("as_eng_parts_p50_ms", legs_as_eng)):
        if stamped and stamped[0] is not None:
            results[key] = {part: float(np.median([getattr(t, part) for t in stamped]))
                            for part in ("dense", "keyword", "fuse")}
    # The filter must not starve the legs: every filtered result is under the prefix.
    found, _ = every["fused_filtered"](queries[0])
    assert found and all(c.document.startswith(FILTER_PREFIX) for c in found), "filtered search broke"
    found, _ = every["fused_tagged"](queries[0])
    assert found and all(FILTER_TAG in c.tags for c in found), "tag-filtered search broke"
    found, _ = every["fused_broad"](queries[0])
    assert found and not any(c.document.startswith(FILTER_PREFIX) for c in found), "broad filter broke"
    assert ([c.chunk_id for c in every["fused_every"](queries[0])[0]]
            == [c.chunk_id for c in every["fused"](queries[0])[0]]), "a filter keeping all changed the answer"
    found, _ = every["fused_as_eng"](queries[0])
    assert found and not any(int(c.document.rsplit("-", 1)[1][:7]) % FOLDERS == HR_ONLY for c in found), \
        "a document of hr reached eng"
    behalf_pool.close()
    return results


def _openblas_threads() -> tuple[Callable[[], int], Callable[[int], None]] | None:
    """Return (get, set) of the thread count of the OpenBLAS numpy loaded, or None if not found."""
    import ctypes

    try:
        paths = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
                 if "openblas" in line.lower() and line.rstrip().endswith(".so")}
    except OSError:
        return None
    for path in sorted(paths):
        lib = ctypes.CDLL(path)
        for suffix in ("64_", ""):
            for prefix in ("scipy_openblas", "openblas"):
                getter = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                setter = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                if getter is not None and setter is not None:
                    return getter, setter
    return None


def numpy_case(corpus: Corpus, queries: Sequence[Query]) -> dict[str, dict[str, float]]:
    """Time numpy brute force over the same vectors: float32 matrix @ q, argpartition top 50, sorted.

    Returns ``{"numpy": timing with numpy's default BLAS threads, "numpy_1_thread": timing with
    one BLAS thread}`` (the second only when the OpenBLAS numpy uses can be found).
    """
    matrix = np.ascontiguousarray(corpus.vectors, dtype=np.float32)
    top_n = min(NUMPY_TOP, len(matrix) - 1)

    def top(q: Query) -> np.ndarray:
        scores = matrix @ q.vector
        best = np.argpartition(-scores, top_n)[:top_n]
        return best[np.argsort(-scores[best], kind="stable")]

    timings = {"numpy": time_calls(top, queries)}
    threads = _openblas_threads()
    if threads is not None:
        get, set_ = threads
        before = get()
        set_(1)
        try:
            timings["numpy_1_thread"] = time_calls(top, queries)
        finally:
            set_(before)
    return timings


def dense_agreement(pool, corpus: Corpus, queries: Sequence[Query]) -> float:
    """Return the mean overlap (0-1) of the dense leg's top 10 with numpy's top 10 on the same vectors."""
    overlaps = []
    for q in queries[:20]:
        with pool.connection() as conn:
            found, _ = run_search(conn, base_ids=[corpus.base_id], model=corpus.model, query_embedding=q.vector,
                                  terms=[], top_k=TOP_K, filters=Filters())
        expected = set(corpus.chunk_ids[np.argsort(-(corpus.vectors @ q.vector))[:TOP_K]].tolist())
        overlaps.append(len(expected & {c.chunk_id for c in found}) / TOP_K)
    return float(np.mean(overlaps))


class _ExplainingCursor:
    """A cursor that, before running the fused statement, runs it under EXPLAIN (ANALYZE, BUFFERS)."""

    def __init__(self, cursor, conn, plans: list[str]) -> None:
        self._cursor, self._conn, self._plans = cursor, conn, plans

    def __enter__(self):
        self._cursor.__enter__()
        return self

    def __exit__(self, *exc):
        return self._cursor.__exit__(*exc)

    def execute(self, query, params=None, **kwargs):
        if isinstance(query, str) and query == sqlfiles.load("search/hybrid"):
            with self._conn.cursor() as plain:
                rows = plain.execute("EXPLAIN (ANALYZE, BUFFERS) " + query, params).fetchall()
            self._plans.append("\n".join(r[0] for r in rows))
        self._cursor.execute(query, params, **kwargs)
        return self

    def __getattr__(self, name):
        return getattr(self._cursor, name)


class _ExplainingConnection:
    """A connection whose cursors explain the fused statement (see :class:`_ExplainingCursor`)."""

    def __init__(self, conn, plans: list[str]) -> None:
        self._conn, self._plans = conn, plans

    def cursor(self, *args, **kwargs):
        return _ExplainingCursor(self._conn.cursor(*args, **kwargs), self._conn, self._plans)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def explain_fused(pool, corpus: Corpus, q: Query, path_prefix: str | None = None,
                 principals: Sequence[str] | None = None) -> str:
    """Return EXPLAIN (ANALYZE, BUFFERS) of the fused statement for one query, with the parameters
    ``run_search`` itself gives it (whatever they are); on behalf of `principals` (row-level
    security, as :class:`metis_pg.access.OnBehalf` runs it) unless None."""
    plans: list[str] = []
    with pool.connection() as conn:
        for _ in range(2):  # the first warms
            if principals is not None:
                access.begin_on_behalf(conn, principals)
            run_search(_ExplainingConnection(conn, plans), base_ids=[corpus.base_id], model=corpus.model,
                       query_embedding=q.vector, terms=q.terms, top_k=TOP_K, filters=Filters(path_prefix=path_prefix))
    if not plans:
        return "(the fused statement was not run: search/hybrid not found)"
    # The query vector's 384 values, printed in every node that uses it, say nothing: shortened.
    return re.sub(r"'\[[-+0-9.,eE]{200,}\]'", lambda m: f"'[{m.group(0).count(',') + 1} values]'", plans[-1])


# --------------------------------------------------------------------------- indexing


_SENTENCE_WORDS = (6, 18)


def realish_text(rng: np.random.Generator, words: list[str], cdf: np.ndarray, chars: int) -> str:
    """Return ~`chars` characters of sentences: capitalised Zipf words, commas, numbers and identifiers."""
    out: list[str] = []
    length = 0
    while length < chars:
        n = int(rng.integers(*_SENTENCE_WORDS))
        picked = [words[i] for i in draw(rng, cdf, n).tolist()]
        picked[0] = picked[0].capitalize()
        r = rng.random()
        if r < 0.15:
            picked.insert(int(rng.integers(1, n)), f"PO-{int(rng.integers(1000, 9999))}")
        elif r < 0.25:
            picked.insert(int(rng.integers(1, n)), f"v{rng.integers(1, 4)}.{rng.integers(0, 20)}.{rng.integers(0, 9)}")
        elif r < 0.35:
            picked.insert(int(rng.integers(1, n)), f"{int(rng.integers(2, 500))}")
        if n > 8 and rng.random() < 0.4:
            picked[n // 2] += ","
        sentence = " ".join(picked) + rng.choice([".", ".", ".", "?", "!"])
        out.append(sentence)
        length += len(sentence) + 1
    return " ".join(out)[:chars].rsplit(" ", 1)[0] + "."



def indexing_throughput(pool, w: Words, rng: np.random.Generator, total_chunks: int = INDEXING_CHUNKS) -> dict:
    """Write ~`total_chunks` chunks of ~1,000 characters into a new base with storage.write_documents.

    Vectors are precomputed random unit vectors, so the figure excludes model time; it
    includes tokenizing, COPY of documents, chunks, postings and vectors, and the BM25
    statistics, through the indexer's own batches (``metis_pg.indexing.run.Batch``:
    ``BATCH_CHUNKS`` chunks or the default most documents of ``metis index``, whichever is fewer;
    documents of 10 chunks), as ``metis index`` writes them when the model keeps up. The base is
    dropped after.

    Returns:
        ``{"chunks", "seconds", "chunks_per_s", "mean_chunk_chars", "batch_chunks"}``.
    """
    spec = BaseSpec()
    corpus = create_corpus(pool, spec, "bench-index")
    documents = []
    for d in range(max(1, total_chunks // 10)):
        chunks, offset = [], 0
        for ordinal in range(10):
            text = realish_text(rng, w.words, w.cdf, 1000)
            chunks.append(Chunk(
                ordinal=ordinal, text=text, title=f"Report {d}", headings=(f"Section {ordinal // 3 + 1}",),
                page=None, line=1 + 6 * ordinal, char_start=offset, char_end=offset + len(text),
            ))
            offset += len(text) + 2
        meta = storage.DocumentMeta(f"reports/report-{d:05d}.md", f"Report {d}", "md", f"h{d}", offset)
        documents.append((meta, chunks, list(unit_vectors(rng, len(chunks)))))
    written = 0
    per_batch = max(1, min(INDEX_BATCH_CHUNKS // 10, INDEX_BATCH_DOCUMENTS))
    t0 = time.perf_counter()
    # Through the indexer's own batches (metis_pg.indexing.run.Batch: since issue 24 a batch is written
    # while the next documents are tokenized), each document tokenized as it is added.
    from metis_pg.indexing import run as indexing_run

    batch = indexing_run.Batch(pool, corpus.base_id, corpus.source_id, corpus.model,
                               indexing_run.Run(base=corpus.name, base_id=corpus.base_id),
                               max_documents=INDEX_BATCH_DOCUMENTS)
    for meta, chunks, vectors in documents:
        batch.add(storage.PendingDocument(meta, chunks, vectors))
        written += len(chunks)
    batch.write()
    elapsed = time.perf_counter() - t0
    with pool.connection() as conn:
        storage.drop_base(conn, corpus.name)
    return {"chunks": written, "seconds": elapsed, "chunks_per_s": written / elapsed, "batch_chunks": per_batch * 10,
            "mean_chunk_chars": float(np.mean([len(c.text) for _, cs, _ in documents for c in cs]))}


# --------------------------------------------------------------------------- storage compare


def storage_compare(pool, rng: np.random.Generator, n: int, queries: Sequence[Query]) -> list[dict]:
    """Return exact-scan p50/p95 (ms) at `n` vectors for vector vs halfvec, default storage vs PLAIN.

    Scratch tables ``bench_scratch_*`` (id bigint, embedding), dropped after; query:
    ``SELECT id ORDER BY embedding <=> q, id LIMIT 50``.
    """
    vectors = unit_vectors(rng, n)
    ids = np.arange(n, dtype=np.int64)
    streams = {"vector": vectors_copy_binary([("int8", ids)], vectors, ">f4"),
               "halfvec": vectors_copy_binary([("int8", ids)], vectors, ">f2")}
    rows = []
    for column_type in ("vector", "halfvec"):
        for plain in (False, True):
            table = f"bench_scratch_{column_type}_{'plain' if plain else 'default'}"
            ident = sql.Identifier(table)
            with pool.connection() as conn:
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident))
                conn.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, embedding {} NOT NULL)").format(
                    ident, sql.SQL(column_type)))
                if plain:
                    conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN embedding SET STORAGE PLAIN").format(ident))
                copy_in = sql.SQL("COPY {} (id, embedding) FROM STDIN (FORMAT BINARY)").format(ident)
                with conn.cursor() as cur, cur.copy(copy_in) as copy:
                    copy.write(streams[column_type])
            with db_autocommit(pool) as conn:
                conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(ident))
            query = sql.SQL("SELECT id FROM {} ORDER BY embedding <=> %s::{}, id LIMIT 50").format(
                ident, sql.SQL(column_type))

            def scan(q: Query, query=query) -> None:
                with pool.connection() as conn:
                    conn.execute(query, (q.vector,)).fetchall()

            timing = time_calls(scan, queries)
            with pool.connection() as conn:
                size = conn.execute("SELECT pg_total_relation_size(%s::regclass)", (table,)).fetchone()[0]
                conn.execute(sql.SQL("DROP TABLE {}").format(ident))
            rows.append({"type": column_type, "storage": "PLAIN" if plain else "default (EXTERNAL/EXTENDED)",
                         "bytes_per_1k": size * 1000 / n, **timing})
    return rows


class db_autocommit:
    """A pool connection in autocommit mode (VACUUM cannot run in a transaction)."""

    def __init__(self, pool) -> None:
        self._cm = pool.connection()

    def __enter__(self):
        self.conn = self._cm.__enter__()
        self.conn.commit()
        self.conn.autocommit = True
        return self.conn

    def __exit__(self, *exc):
        self.conn.autocommit = False
        return self._cm.__exit__(*exc)


# --------------------------------------------------------------------------- figures


def headline(chunks: int, cases: dict, numpy_timings: dict, indexing: dict, size: dict) -> dict:
    """Return the issue's JSON keys (chunks, dense_p50_ms, ..., mb_per_1k_chunks) from one setting's figures.

    ``numpy_p50_ms`` is the faster of numpy with its default BLAS threads and with one (on a
    busy 2-core machine two BLAS threads can be far slower than one).
    """
    out: dict = {"chunks": chunks}
    for key, case in (("dense", "dense"), ("keyword", "keyword"), ("fused", "fused"), ("filtered", "fused_filtered"),
                      ("tagged", "fused_tagged"), ("broad", "fused_broad"), ("every", "fused_every"),
                      ("as_eng", "fused_as_eng")):
        out[f"{key}_p50_ms"] = cases[case]["p50_ms"]
        out[f"{key}_p95_ms"] = cases[case]["p95_ms"]
    out["numpy_p50_ms"] = min(t["p50_ms"] for t in numpy_timings.values())
    out["indexing_chunks_per_s"] = indexing["chunks_per_s"]
    out["mb_per_1k_chunks"] = size["mb_per_1k_chunks"]
    return out


def measure_base(pool, corpus: Corpus, queries: Sequence[Query], budget_s: float, indexing_chunks: int,
                 w: Words, rng: np.random.Generator, three: Sequence[int] = ()) -> tuple[dict, dict]:
    """Time the four cases (and, with `three` base ids, the fused statement over them) on `corpus`,
    numpy on its vectors, then indexing; the size is read first (before the indexing base comes and goes).

    Returns:
        (headline keys, details).
    """
    size = database_size(pool)
    cases = search_cases(pool, [corpus.base_id], corpus.model, queries, budget_s, three_base_ids=three)
    numpy_timings = numpy_case(corpus, queries)
    indexing = indexing_throughput(pool, w, rng, indexing_chunks)
    figures = headline(corpus.chunks, cases, numpy_timings, indexing, size)
    if three:
        figures["three_bases_p50_ms"] = cases["three_bases"]["p50_ms"]
        figures["three_bases_p95_ms"] = cases["three_bases"]["p95_ms"]
        figures["three_bases_per_base_p50_ms"] = cases["three_bases_per_base"]["p50_ms"]
        figures["three_bases_per_base_p95_ms"] = cases["three_bases_per_base"]["p95_ms"]
        figures["sum_of_the_three_p95_ms"] = sum(cases[f"base_{i + 1}_of_3"]["p95_ms"] for i in range(len(three)))
    details = {
        "cases": cases, **numpy_timings,
        "dense_over_numpy_p50": figures["dense_p50_ms"] / figures["numpy_p50_ms"],
        "dense_top10_agreement_with_numpy": dense_agreement(pool, corpus, queries),
        "size": size, "indexing": indexing, "documents": corpus.documents,
    }
    return figures, details


def git_commit() -> str:
    """Return the commit of the metis_pg checkout imported (``+dirty`` when it has changes), or "unknown"."""
    root = Path(metis_pg.__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def load_avg() -> list[float]:
    """Return ``os.getloadavg()`` (1, 5, 15 minutes) as a list."""
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, str]:
    """Return the CPU model, core count and platform of this machine."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "nproc": str(os.cpu_count()), "platform": platform.platform(),
            "python": platform.python_version(), "numpy": np.__version__}


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000, help="chunks of the base (and of each base with --bases)")
    parser.add_argument("--bases", type=int, default=1,
                        help="then load more bases of --chunks chunks into the same database, up to this many,"
                             " and measure the first again, plus a search over 3 (JSON key bases_N)")
    parser.add_argument("--corpus", choices=sorted(CORPORA), default="zipf",
                        help="zipf: 150 Zipf words per chunk (the earlier figures); topics: bursty topic words,"
                             " chunk lengths 40-250 words")
    parser.add_argument("--queries", type=int, default=50, help="timed queries per case")
    parser.add_argument("--dsn", help="PostgreSQL URL (default: a throwaway embedded server)")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    parser.add_argument("--storage-compare", action="store_true",
                        help="also time exact scans of vector vs halfvec, with/without STORAGE PLAIN, at 100k")
    parser.add_argument("--explain", type=Path, help="write EXPLAIN (ANALYZE, BUFFERS) of the fused statement here")
    parser.add_argument("--indexing-chunks", type=int, default=INDEXING_CHUNKS, help="chunks written to time indexing")
    parser.add_argument("--load-batch-chunks", type=int, default=LOAD_BATCH_CHUNKS,
                        help="chunks per write_documents call (one transaction) when loading the bases")
    parser.add_argument("--case-budget-s", type=float, default=40.0,
                        help="seconds per search case: timing stops after (cases) x this (at least 10 queries)")
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--baseline-statement", type=Path,
                        help="also time this fused statement (e.g. `git show <commit>:sql/search/hybrid.sql`), "
                             "query by query in turn with the others: case fused_baseline")
    parser.add_argument("--baseline-after", type=Path,
                        help="with --baseline-statement: also run this statement after it, on the same connection, "
                             "with base_ids and terms (e.g. `git show c3e55c2~1:sql/search/term_weights.sql`, "
                             "the snippet marks' statistics the pipeline read apart before c3e55c2)")
    parser.add_argument("--keep", action="store_true", help="keep the benchmark bases (with --dsn)")
    args = parser.parse_args(argv)
    global BASELINE_STATEMENT, BASELINE_AFTER
    if args.baseline_statement:
        BASELINE_STATEMENT = args.baseline_statement.read_text(encoding="utf-8")
    if args.baseline_after:
        BASELINE_AFTER = args.baseline_after.read_text(encoding="utf-8")
    command = "python benchmarks/search_latency.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    if os.environ.get("PGOPTIONS"):  # server settings tried from the environment are part of the command
        command = f"PGOPTIONS={shlex.quote(os.environ['PGOPTIONS'])} {command}"
    rng = np.random.default_rng(args.seed)
    report: dict = {"command": command, "git_commit": git_commit(), "machine": machine(),
                    "load_avg": {"start": load_avg()}, "corpus": args.corpus, "dim": DIM, "top_k": TOP_K,
                    "queries": args.queries, "vocabulary": VOCABULARY_SIZE}
    started = time.perf_counter()

    dsn = args.dsn
    if dsn is None:
        home = Path(tempfile.mkdtemp(prefix="metis-bench-"))
        atexit.register(shutil.rmtree, home, ignore_errors=True)  # runs after the server's own atexit stop
        dsn = db.embedded_dsn(home / "pgdata")
    migrate.upgrade(dsn, settings=Settings.from_env())
    pool = db.open_pool(dsn, max_size=4, settings=Settings.from_env())  # 3 at once: a search over three bases runs a statement per base
    w = Words.make()
    check_tokenizer_agrees(w)
    spec = BaseSpec()
    corpora: list[Corpus] = []
    try:
        corpus = create_corpus(pool, spec)
        corpora.append(corpus)
        t0 = time.perf_counter()
        load = load_base(pool, corpus, args.chunks, w, args.corpus, rng, batch_chunks=args.load_batch_chunks,
                         label="base 1: ")
        load["vacuum_tables"] = vacuum_analyze(dsn)
        load["load_s"] = time.perf_counter() - t0
        print(f"[{args.chunks:,} chunks loaded in {load['load_s']:.1f} s: write_documents {load['write_s']:.1f} s"
              f" ({load['load_chunks_per_s']:.0f} chunks/s), making texts {load['generate_s']:.1f} s]",
              file=sys.stderr)
        queries = QUERIES[args.corpus](rng, args.queries, w, corpus)
        figures, details = measure_base(pool, corpus, queries, args.case_budget_s, args.indexing_chunks, w, rng)
        report.update(figures)
        report["details"] = {**details, "load": load, "example_queries": [q.terms for q in queries[:5]]}
        if args.explain:
            q = max(queries[:10], key=lambda q: len(q.terms))
            args.explain.write_text(
                f"-- {command}\n-- {corpus.chunks} chunks, terms {q.terms}\n" + explain_fused(pool, corpus, q)
                + f"\n\n-- same, path_prefix {FILTER_PREFIX!r}\n" + explain_fused(pool, corpus, q, FILTER_PREFIX)
                + "\n\n-- same, no filter, on behalf of eng (row-level security)\n"
                + explain_fused(pool, corpus, q, principals=["eng"]) + "\n")
        if args.bases > 1:
            report[f"bases_{args.bases}"] = many_bases(pool, dsn, corpora, args, w, rng, queries, spec)
        if args.storage_compare:
            report["details"]["storage_compare"] = storage_compare(pool, rng, 100_000, queries)
    finally:
        if args.dsn and not args.keep:
            with pool.connection() as conn:
                for c in corpora:
                    storage.drop_base(conn, c.name)
        pool.close()
    report["wall_s"] = time.perf_counter() - started
    report["load_avg"]["end"] = load_avg()

    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


def many_bases(pool, dsn: str, corpora: list[Corpus], args, w: Words, rng: np.random.Generator,
               queries: Sequence[Query], spec: BaseSpec) -> dict:
    """Load bases of ``args.chunks`` chunks until the database holds ``args.bases``, then measure the first.

    `corpora` holds the first base (measured alone already) and gets the new ones (so they are
    dropped at the end with ``--dsn``). Only the first keeps its vectors (numpy compares with it).

    Returns:
        the headline keys for the first base of `args.bases` (``mb_per_1k_chunks``: every base
        table over every chunk in the database), ``three_bases_p50_ms``/``_p95_ms`` (the fused
        statement over the first three bases), ``load_avg`` of this part, the load's seconds
        and ``details``.
    """
    part = {"load_avg": {"start": load_avg()}}
    t0 = time.perf_counter()
    write_s = 0.0
    for i in range(len(corpora), args.bases):
        corpus = create_corpus(pool, spec, f"bench-{i + 1}")
        corpora.append(corpus)
        load = load_base(pool, corpus, args.chunks, w, args.corpus, rng, batch_chunks=args.load_batch_chunks,
                         keep_vectors=False, label=f"base {i + 1}/{args.bases}: ")
        write_s += load["write_s"]
        print(f"[base {i + 1}/{args.bases}: {args.chunks:,} chunks in {load['write_s']:.1f} s of write_documents"
              f" ({load['load_chunks_per_s']:.0f} chunks/s)]", file=sys.stderr)
    vacuum_analyze(dsn)
    part["load_s"] = time.perf_counter() - t0
    part["load_chunks_per_s"] = (args.bases - 1) * args.chunks / write_s if write_s else 0.0
    first = corpora[0]
    three = [c.base_id for c in corpora[:THREE]]
    figures, details = measure_base(pool, first, queries, args.case_budget_s, args.indexing_chunks, w, rng,
                                    three=three)
    part["load_avg"]["end"] = load_avg()
    return {**figures, "bases": args.bases, "three_bases_count": len(three), **part, "details": details}


def fmt(t: dict[str, float]) -> str:
    return f"{t['p50_ms']:8.2f} {t['p95_ms']:8.2f} {t['n']:4d}"


LABELS = [("dense", "dense leg (terms=[])"), ("keyword", "keyword leg (no vector)"),
          ("fused", "fused statement"), ("fused_filtered", f"fused, path_prefix {FILTER_PREFIX} (1%)"),
          ("fused_tagged", f"fused, tags_any {FILTER_TAG} (1%)"),
          ("fused_broad", f"fused, all but {FILTER_PREFIX} (99%)"),
          ("fused_every", "fused, kinds md (all)"),
          ("fused_as_eng", "fused, on behalf of eng (RLS)"),
          ("three_bases", "fused over 3 bases, one statement"),
          ("three_bases_per_base", "fused over 3, a statement per base"),
          ("three_bases_dense", "  one statement, dense leg only"), ("three_bases_keyword", "  one statement, keyword leg only"),
          ("base_1_of_3", "  base 1 of the 3 alone"), ("base_2_of_3", "  base 2 of the 3 alone"),
          ("base_3_of_3", "  base 3 of the 3 alone"), ("fused_baseline", "fused, --baseline-statement"),
          ("broad_baseline", "  the same, 99% kept"), ("every_baseline", "  the same, all kept"),
          ("numpy", "numpy brute force (float32)"), ("numpy_1_thread", "numpy, 1 BLAS thread")]


def print_setting(title: str, figures: dict, details: dict) -> None:
    print(f"\n{title}")
    print(f"  {'case':<34} {'p50 ms':>8} {'p95 ms':>8} {'n':>4}")
    timings = {**details["cases"], **{k: details[k] for k in ("numpy", "numpy_1_thread") if k in details}}
    for key, label in LABELS:
        if key in timings:
            print(f"  {label:<34} {fmt(timings[key])}")
    for key, label in (("fused_parts_p50_ms", "fused"), ("as_eng_parts_p50_ms", "as eng")):
        parts = details["cases"].get(key)
        if parts:
            print(f"  {label}, inside: dense {parts['dense']:.1f} / keyword {parts['keyword']:.1f} / "
                  f"fuse+fetch {parts['fuse']:.1f} ms (p50)")
    size = details["size"]
    tables = ", ".join(f"{t} {b / 1e6 * 1000 / max(size['chunks_in_database'], 1):.2f}"
                       for t, b in sorted(size["tables"].items(), key=lambda kv: -kv[1]) if b > 1e6)
    print(f"  dense / faster numpy (p50) = {details['dense_over_numpy_p50']:.2f}x; dense top-10 = numpy top-10 "
          f"{100 * details['dense_top10_agreement_with_numpy']:.0f}%")
    print(f"  size {figures['mb_per_1k_chunks']:.2f} MB per 1k chunks over {size['chunks_in_database']:,} chunks"
          f" ({tables})")
    if size.get("relations"):
        relations = ", ".join(f"{r} {b / 1e6 * 1000 / max(size['chunks_in_database'], 1):.3f}"
                              for r, b in sorted(size["relations"].items(), key=lambda kv: -kv[1]) if b > 2e5)
        print(f"  of which, MB per 1k chunks: {relations}")
    i = details["indexing"]
    print(f"  indexing without model time (the indexer's batches, {i['chunks']} chunks of ~{i['mean_chunk_chars']:.0f}"
          f" chars, {i['batch_chunks']} per transaction): {i['chunks_per_s']:.0f} chunks/s")


def print_report(report: dict) -> None:
    m = report["machine"]
    print(f"\n{report['command']}\ncommit {report['git_commit']}")
    print(f"{m['cpu']}, {m['nproc']} cores, Python {m['python']}, numpy {m['numpy']}; corpus {report['corpus']}, "
          f"dim {report['dim']}, top_k {report['top_k']}, {report['queries']} queries per case")
    load = report["details"]["load"]
    print_setting(f"one base of {report['chunks']:,} chunks (loaded through write_documents in {load['write_s']:.0f} s,"
                  f" {load['load_chunks_per_s']:.0f} chunks/s; {load['load_s']:.0f} s with VACUUM)",
                  report, report["details"])
    for key, value in report.items():
        if key.startswith("bases_"):
            print_setting(f"one base of {value['bases']} ({value['bases'] * value['chunks']:,} chunks in the database;"
                          f" the other bases loaded in {value['load_s']:.0f} s, {value['load_chunks_per_s']:.0f}"
                          f" chunks/s)", value, value["details"])
            print(f"  load average (1 min) {value['load_avg']['start'][0]:.2f} at its start,"
                  f" {value['load_avg']['end'][0]:.2f} at its end")
    for row in report["details"].get("storage_compare", []):
        print(f"storage compare 100k: {row['type']:<8} {row['storage']:<28} p50 {row['p50_ms']:.2f} ms, "
              f"p95 {row['p95_ms']:.2f} ms, {row['bytes_per_1k'] / 1e6:.2f} MB per 1k")
    print("\n" + json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in report.items()
                             if k in KEYS}))
    start, end = report["load_avg"]["start"], report["load_avg"]["end"]
    print(f"\nwall time {report['wall_s']:.0f} s; load average (1 min) {start[0]:.2f} at start, {end[0]:.2f} at end")


KEYS = ("chunks", "dense_p50_ms", "dense_p95_ms", "keyword_p50_ms", "keyword_p95_ms", "fused_p50_ms", "fused_p95_ms",
        "filtered_p50_ms", "filtered_p95_ms", "tagged_p50_ms", "tagged_p95_ms", "broad_p50_ms", "broad_p95_ms",
        "every_p50_ms", "every_p95_ms", "numpy_p50_ms",
        "indexing_chunks_per_s", "mb_per_1k_chunks")


if __name__ == "__main__":
    sys.exit(main())
