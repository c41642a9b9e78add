"""Search latency of metis_pg at 10k and 100k synthetic chunks, beside numpy brute force.

Prints p50/p95 (ms) of the dense leg alone, the keyword leg alone, the fused
statement (``sql/search/hybrid.sql``, both legs and RRF) and the fused
statement with a ``path_prefix`` filter matching 1% of the documents, all
through :func:`metis_pg.retrieval.run_search` (top_k 10); numpy brute-force
cosine over the same vectors in the same run; the ratio dense leg / numpy;
the database size per 1,000 chunks; and indexing throughput without model
time through the real write path (:func:`metis_pg.storage.write_documents`, in the indexer's batches).

The corpus is made up, and bulk-loaded with COPY straight into the tables:

- a vocabulary of 50,000 pronounceable letter-only words (shortest = most
  common), so :func:`metis_pg.tokenizer.terms` of a chunk is its words;
- chunks of 150 words drawn from a Zipf law, p(rank r) = 1 / (r * H), over the
  vocabulary (the most common word is ~9% of all words, as "the" is in English);
  documents of 5-15 chunks (10 on average) under 100 top folders
  ``area-00/`` .. ``area-99/``, so ``path_prefix="area-07/"`` keeps 1%;
- random unit vectors of 384 dimensions, rounded to float16 (what ``halfvec``
  stores); numpy searches the same float16 values as a float32 matrix;
- postings (tf, chunk length), ``bm25_terms`` (df) and ``bm25_totals`` computed
  from the words, as ``storage.write_documents`` would.

Vectors go in by binary COPY (halfvec's own format: the same float16 values as
text ``'[...]'``, much faster to write); on the throwaway server the postings
indexes are dropped before their COPY and rebuilt from their catalog
definitions after. Then VACUUM (ANALYZE), so statistics, hint bits and the
visibility map are as in a steady state.

Queries: 2-4 distinct words drawn from the same Zipf law (so most queries mix a
very common word with rarer ones, as a typed question does: no stop words are
removed, SPEC F6) and a random unit vector. Each kind of query is warmed up
first, then timed on the client around ``run_search`` (statement + fetch); the
four cases take turns query by query and stop together after 4 x
``--case-budget-s`` seconds (at least 10 queries).

Usage::

    python benchmarks/search_latency.py                      # 10k and 100k, throwaway server
    python benchmarks/search_latency.py --chunks 10000 --queries 20 --json out.json
    python benchmarks/search_latency.py --dsn postgresql://... # an existing database
    python benchmarks/search_latency.py --storage-compare    # + vector/halfvec x storage at 100k

With no ``--dsn`` the embedded PostgreSQL starts in a temporary folder that is
deleted at the end. With ``--dsn`` the benchmark works in its own base
(``bench-<random>``), dropped at the end; sizes then include other data.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

try:
    import metis_pg  # noqa: F401
except ImportError:  # a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from psycopg import sql

from metis_pg import db, migrate, sqlfiles, storage
from metis_pg.chunking import Chunk
from metis_pg.config import BaseSpec
from metis_pg.retrieval import Filters, leg_limit, run_search
from metis_pg.tokenizer import terms as text_terms

DIM = 384
VOCABULARY_SIZE = 50_000
WORDS_PER_CHUNK = 150
TOP_K = 10
NUMPY_TOP = 50  # what the dense leg keeps: leg_limit(10)
FOLDERS = 100  # top folders of the documents: one prefix keeps 1%
FILTER_PREFIX = "area-07/"
WARMUP_QUERIES = 5
INDEXING_CHUNKS = 2_000
INDEX_BATCH_CHUNKS = 500  # metis_pg.indexing._BATCH_CHUNKS: a transaction per 500 chunks
BENCH_TABLES = ("sources", "documents", "chunks", "embeddings", "postings", "bm25_terms", "bm25_totals")


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
class Corpus:
    """What has been loaded into the benchmark base so far."""

    base_id: int
    source_id: int
    model: str
    vectors: np.ndarray  # (n, dim) float32, the halfvec values
    chunk_ids: np.ndarray  # (n,) int64, chunk_id of each row of vectors
    chunks: int = 0
    documents: int = 0


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


def _copy_text(cur, statement: str, lines: Sequence[str], batch: int = 50_000) -> None:
    with cur.copy(statement) as copy:
        for i in range(0, len(lines), batch):
            copy.write("".join(lines[i:i + batch]))


def _postings_indexes(conn) -> list[tuple[str, str, bool]]:
    """Return (name, definition, is_constraint) of every index of ``postings``, as the migrations made them."""
    return conn.execute(
        "SELECT i.relname, coalesce(pg_get_constraintdef(c.oid), pg_get_indexdef(i.oid)), c.oid IS NOT NULL"
        " FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid"
        " LEFT JOIN pg_constraint c ON c.conindid = i.oid AND c.conrelid = x.indrelid"
        " WHERE x.indrelid = 'postings'::regclass ORDER BY 1"
    ).fetchall()


def load_chunks(conn, corpus: Corpus, n_new: int, words: list[str], p: np.ndarray, rng: np.random.Generator,
                *, rebuild_indexes: bool = False) -> dict[str, float]:
    """Append `n_new` chunks (whole documents) to the base with COPY, then refresh df and totals.

    Args:
        rebuild_indexes: drop the indexes of ``postings`` before its COPY and rebuild them
            from their saved definitions after (only on a throwaway server: 10 million
            postings load several times faster this way).

    Returns:
        seconds spent in each step.
    """
    steps: dict[str, float] = {}
    clock = [time.perf_counter()]

    def step(name: str) -> None:
        now = time.perf_counter()
        steps[name] = now - clock[0]
        clock[0] = now
    # Documents of 5-15 chunks; the last one is cut to land exactly on n_new.
    sizes = []
    while sum(sizes) < n_new:
        sizes.append(int(rng.integers(5, 16)))
    sizes[-1] -= sum(sizes) - n_new
    sizes = [s for s in sizes if s > 0]
    first_doc = conn.execute("SELECT nextval('documents_document_id_seq')").fetchone()[0]
    doc_ids = np.arange(first_doc, first_doc + len(sizes))
    conn.execute("SELECT setval('documents_document_id_seq', %s)", (int(doc_ids[-1]),))
    first_chunk = conn.execute("SELECT nextval('chunks_chunk_id_seq')").fetchone()[0]
    chunk_ids = np.arange(first_chunk, first_chunk + n_new)
    conn.execute("SELECT setval('chunks_chunk_id_seq', %s)", (int(chunk_ids[-1]),))
    chunk_doc = np.repeat(doc_ids, sizes)
    ordinals = np.concatenate([np.arange(s) for s in sizes])

    word_ids = draw(rng, np.cumsum(p), (n_new, WORDS_PER_CHUNK))
    vectors = unit_vectors(rng, n_new)
    base, source, model = corpus.base_id, corpus.source_id, corpus.model
    with conn.cursor() as cur:
        lines = []
        for i, (doc_id, size) in enumerate(zip(doc_ids.tolist(), sizes)):
            n = corpus.documents + i
            lines.append(
                f"{doc_id}\t{base}\t{source}\tarea-{n % FOLDERS:02d}/doc-{n:07d}.md\tDocument {n}\tmd\t"
                f"h{n:x}\t{size * 1000}\n"
            )
        _copy_text(cur, "COPY documents (document_id, base_id, source_id, path, title, kind, content_hash,"
                   " size_bytes) FROM STDIN", lines)
        step("documents")

        lines = []
        for row, chunk_id, doc_id, ordinal in zip(word_ids.tolist(), chunk_ids.tolist(), chunk_doc.tolist(),
                                                  ordinals.tolist()):
            text = " ".join([words[w] for w in row])
            lines.append(
                f"{chunk_id}\t{base}\t{doc_id}\t{ordinal}\t{text}\tDocument {doc_id}\t{{}}\t\\N\t{1 + 4 * ordinal}"
                f"\t0\t{len(text)}\t{WORDS_PER_CHUNK}\n"
            )
        _copy_text(cur, "COPY chunks (chunk_id, base_id, document_id, ordinal, text, title, headings, page, line,"
                   " char_start, char_end, term_count) FROM STDIN", lines)
        del lines
        step("chunks")

        # Binary COPY in halfvec's own format: the same float16 values as text '[...]', 20x faster to write.
        stream = vectors_copy_binary(
            [("int8", chunk_ids), ("text", np.full(n_new, model.encode())), ("int4", np.full(n_new, base)),
             ("int8", chunk_doc)], vectors, ">f2")
        with cur.copy("COPY embeddings (chunk_id, model, base_id, document_id, embedding) FROM STDIN"
                      " (FORMAT BINARY)") as copy:
            for i in range(0, len(stream), 8 << 20):
                copy.write(stream[i:i + (8 << 20)])
        del stream
        step("embeddings")

        # Postings: one row per (chunk, distinct word), tf = its count, chunk_terms = chunk length.
        keys = (np.arange(n_new, dtype=np.int64)[:, None] * len(words) + word_ids).ravel()
        keys, tf = np.unique(keys, return_counts=True)
        rows, terms = np.divmod(keys, len(words))
        term_text = [f"{base}\t{w}\t" for w in words]
        chunk_text = [f"{c}\t{d}\t" for c, d in zip(chunk_ids.tolist(), chunk_doc.tolist())]
        tail = f"\t{WORDS_PER_CHUNK}\n"
        lines = [term_text[t] + chunk_text[r] + str(f) + tail
                 for r, t, f in zip(rows.tolist(), terms.tolist(), tf.tolist())]
        step("postings_text")
        indexes = _postings_indexes(conn) if rebuild_indexes else []
        for name, _, is_constraint in indexes:
            drop = "ALTER TABLE postings DROP CONSTRAINT {}" if is_constraint else "DROP INDEX {}"
            conn.execute(sql.SQL(drop).format(sql.Identifier(name)))
        _copy_text(cur, "COPY postings (base_id, term, chunk_id, document_id, tf, chunk_terms) FROM STDIN", lines,
                   batch=200_000)
        del lines
        step("postings_copy")
        if indexes:
            conn.execute("SET LOCAL maintenance_work_mem = '1GB'")
            for name, definition, is_constraint in indexes:
                if is_constraint:  # definition: "PRIMARY KEY (...)" and the like, from the catalog
                    conn.execute(sql.SQL("ALTER TABLE postings ADD CONSTRAINT {} {}").format(
                        sql.Identifier(name), sql.SQL(definition)))
                else:  # definition: the whole CREATE INDEX statement, from the catalog
                    conn.execute(sql.SQL(definition))
            step("postings_indexes")
        df_new = np.bincount(terms, minlength=len(words))

    # BM25 statistics: df per term and the totals, as storage.write_documents keeps them.
    present = np.nonzero(df_new)[0]
    conn.execute(
        "INSERT INTO bm25_terms AS t (base_id, term, df)"
        " SELECT %s, term, df FROM unnest(%s::text[], %s::int[]) AS u (term, df)"
        " ON CONFLICT (base_id, term) DO UPDATE SET df = t.df + EXCLUDED.df",
        (base, [words[t] for t in present.tolist()], df_new[present].tolist()),
    )
    conn.execute(sqlfiles.load("storage/bm25_totals_add"),
                 {"base_id": base, "chunks": n_new, "terms": n_new * WORDS_PER_CHUNK})
    conn.commit()
    corpus.vectors = np.vstack([corpus.vectors, vectors])
    corpus.chunk_ids = np.concatenate([corpus.chunk_ids, chunk_ids])
    corpus.chunks += n_new
    corpus.documents += len(sizes)
    step("bm25_statistics")
    return steps


def check_tokenizer_agrees(conn, base_id: int) -> None:
    """Fail unless the tokenizer gives a sample chunk's words, i.e. postings are what indexing would write."""
    text, = conn.execute("SELECT text FROM chunks WHERE base_id = %s LIMIT 1", (base_id,)).fetchone()
    assert text_terms(text) == text.split(" "), "synthetic words are not single BM25 terms"


def vacuum_analyze(dsn: str) -> None:
    """VACUUM (ANALYZE) the tables, then read each once.

    VACUUM sets statistics, hint bits and the visibility map as in a steady state; the
    read puts the tables in the OS page cache, so the first queries timed do not pay
    for the first reads of the 1.3 GB of postings at 100k chunks.
    """
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in BENCH_TABLES:
            conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(table)))
        for table in BENCH_TABLES:
            conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))


# --------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class Query:
    terms: list[str]
    vector: np.ndarray  # (dim,) float32, unit


def make_queries(rng: np.random.Generator, n: int, words: list[str], p: np.ndarray) -> list[Query]:
    """Return `n` queries: 2-4 distinct Zipf-drawn words and a random unit vector each."""
    vectors = unit_vectors(rng, n)
    cdf = np.cumsum(p)
    queries = []
    for i in range(n):
        count = int(rng.integers(2, 5))
        ids: list[int] = []
        while len(ids) < count:
            w = int(draw(rng, cdf, 1)[0])
            if w not in ids:
                ids.append(w)
        queries.append(Query([words[w] for w in ids], vectors[i]))
    return queries


def percentiles(samples_ms: Sequence[float]) -> dict[str, float]:
    """Return p50 and p95 (ms) of the samples (linear interpolation between order statistics)."""
    a = np.asarray(samples_ms)
    return {"p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95)), "n": len(a)}


def time_calls(fn: Callable[[Query], object], queries: Sequence[Query], budget_s: float = float("inf"),
               outputs: list | None = None) -> dict[str, float]:
    """Warm up on the first queries, then time `fn` once per query; return percentiles.

    Timing stops early once `budget_s` seconds are spent (at least 10 queries are timed):
    the result's ``n`` says how many were. What `fn` returns is appended to `outputs`.
    """
    for q in queries[:WARMUP_QUERIES]:
        fn(q)
    samples = []
    started = time.perf_counter()
    for q in queries:
        t0 = time.perf_counter()
        out = fn(q)
        samples.append((time.perf_counter() - t0) * 1000.0)
        if outputs is not None:
            outputs.append(out)
        if len(samples) >= 10 and time.perf_counter() - started > budget_s:
            break
    return percentiles(samples)


def search_cases(pool, corpus: Corpus, queries: Sequence[Query], budget_s: float) -> dict[str, dict[str, float]]:
    """Time the dense leg, the keyword leg, the fused statement and the filtered fused statement.

    The cases take turns query by query (each query runs in all four before the next),
    so every case is timed on the same queries and the machine's ups and downs fall on
    all of them alike. Timing stops once the four together have spent 4 x `budget_s`
    seconds (at least 10 queries): per-query cost varies a hundredfold with the
    frequency of the query's words, so cases cut at different queries would not compare.
    """

    def run(q: Query, *, dense: bool, keyword: bool, filters: Filters = Filters()):
        with pool.connection() as conn:
            return run_search(
                conn, base_ids=[corpus.base_id], model=corpus.model,
                query_embedding=q.vector if dense else None, terms=q.terms if keyword else [],
                top_k=TOP_K, filters=filters,
            )

    cases: dict[str, Callable[[Query], tuple]] = {
        "dense": lambda q: run(q, dense=True, keyword=False),
        "keyword": lambda q: run(q, dense=False, keyword=True),
        "fused": lambda q: run(q, dense=True, keyword=True),
        "fused_filtered": lambda q: run(q, dense=True, keyword=True, filters=Filters(path_prefix=FILTER_PREFIX)),
    }
    for q in queries[:WARMUP_QUERIES]:
        for fn in cases.values():
            fn(q)
    samples: dict[str, list[float]] = {name: [] for name in cases}
    legs = []
    started = time.perf_counter()
    for i, q in enumerate(queries):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            _, times = fn(q)
            samples[name].append((time.perf_counter() - t0) * 1000.0)
            if name == "fused":
                legs.append(times)  # each leg's end, stamped inside the statement
        if i + 1 >= 10 and time.perf_counter() - started > 4 * budget_s:
            break
    results: dict = {name: percentiles(s) for name, s in samples.items()}
    results["fused_parts_p50_ms"] = {
        part: float(np.median([getattr(t, part) for t in legs])) for part in ("dense", "keyword", "fuse")
    }
    # The filter must not starve the legs: every filtered result is under the prefix.
    found, _ = run(queries[0], dense=True, keyword=True, filters=Filters(path_prefix=FILTER_PREFIX))
    assert found and all(c.document.startswith(FILTER_PREFIX) for c in found), "filtered search broke"
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

    def top(q: Query) -> np.ndarray:
        scores = matrix @ q.vector
        best = np.argpartition(-scores, NUMPY_TOP)[:NUMPY_TOP]
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


def database_size(pool, chunks: int) -> dict[str, float]:
    """Return pg_total_relation_size (bytes, with indexes and TOAST) of each table per 1,000 chunks, and the total."""
    with pool.connection() as conn:
        sizes = {t: conn.execute("SELECT pg_total_relation_size(%s::regclass)", (t,)).fetchone()[0]
                 for t in BENCH_TABLES}
    per_1k = {t: s * 1000 / chunks for t, s in sizes.items()}
    per_1k["total"] = sum(sizes.values()) * 1000 / chunks
    return per_1k


def explain_fused(pool, corpus: Corpus, q: Query, path_prefix: str | None = None) -> str:
    """Return EXPLAIN (ANALYZE, BUFFERS) of the fused statement for one query."""
    params = {
        "base_ids": [corpus.base_id], "model": corpus.model, "query_embedding": q.vector, "terms": q.terms, "term_weights": None,
        "k1": 1.2, "b": 0.75, "rrf_k": 60, "dense_weight": 1.0, "keyword_weight": 1.0,
        "leg_limit": leg_limit(TOP_K), "top_k": TOP_K, **Filters(path_prefix=path_prefix).to_params(),
    }
    statement = sql.SQL("EXPLAIN (ANALYZE, BUFFERS) {}").format(sql.SQL(sqlfiles.load("search/hybrid")))
    with pool.connection() as conn:
        conn.execute(statement, params)  # warm
        return "\n".join(r[0] for r in conn.execute(statement, params))


# --------------------------------------------------------------------------- indexing


_SENTENCE_WORDS = (6, 18)


def realish_text(rng: np.random.Generator, words: list[str], p: np.ndarray, chars: int) -> str:
    """Return ~`chars` characters of sentences: capitalised Zipf words, commas, numbers and identifiers."""
    out: list[str] = []
    length = 0
    cdf = np.cumsum(p)
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


def indexing_throughput(pool, words: list[str], p: np.ndarray, rng: np.random.Generator,
                        total_chunks: int = INDEXING_CHUNKS) -> dict[str, float]:
    """Write ~`total_chunks` chunks of ~1,000 characters with storage.write_documents; return chunks/s.

    Vectors are precomputed random unit vectors, so the figure excludes model time; it
    includes tokenizing, COPY of documents, chunks, postings and vectors, and the BM25
    statistics, in batches of 500 chunks (documents of 10 chunks) per transaction, as
    ``metis index`` writes them when the model keeps up.
    """
    spec = BaseSpec()
    name = f"bench-index-{uuid.uuid4().hex[:8]}"
    with pool.connection() as conn:
        base = storage.create_base(conn, name, "documents", spec.to_json())
        source_id = storage.ensure_source(conn, base.base_id, "bench", None)
    documents = []
    for d in range(total_chunks // 10):
        chunks, offset = [], 0
        for ordinal in range(10):
            text = realish_text(rng, words, p, 1000)
            chunks.append(Chunk(
                ordinal=ordinal, text=text, title=f"Report {d}", headings=(f"Section {ordinal // 3 + 1}",),
                page=None, line=1 + 6 * ordinal, char_start=offset, char_end=offset + len(text),
            ))
            offset += len(text) + 2
        meta = storage.DocumentMeta(f"reports/report-{d:05d}.md", f"Report {d}", "md", f"h{d}", offset)
        documents.append((meta, chunks, list(unit_vectors(rng, len(chunks)))))
    written = 0
    per_batch = max(1, INDEX_BATCH_CHUNKS // 10)
    t0 = time.perf_counter()
    for i in range(0, len(documents), per_batch):
        batch = [storage.PendingDocument(meta, chunks, vectors) for meta, chunks, vectors in documents[i:i + per_batch]]
        with pool.connection() as conn:
            storage.write_documents(conn, base_id=base.base_id, source_id=source_id, documents=batch,
                                    model=spec.fingerprint)
        written += sum(len(d.chunks) for d in batch)
    elapsed = time.perf_counter() - t0
    with pool.connection() as conn:
        storage.drop_base(conn, name)
    return {"chunks": written, "seconds": elapsed, "chunks_per_s": written / elapsed,
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
                with conn.cursor() as cur:
                    with cur.copy(sql.SQL("COPY {} (id, embedding) FROM STDIN (FORMAT BINARY)").format(ident)) as copy:
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


# --------------------------------------------------------------------------- main


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


def fmt(t: dict[str, float]) -> str:
    return f"{t['p50_ms']:8.2f} {t['p95_ms']:8.2f} {t['n']:4d}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, nargs="+", default=[10_000, 100_000], help="corpus sizes, ascending")
    parser.add_argument("--queries", type=int, default=50, help="timed queries per case")
    parser.add_argument("--dsn", help="PostgreSQL URL (default: a throwaway embedded server)")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    parser.add_argument("--storage-compare", action="store_true",
                        help="also time exact scans of vector vs halfvec, with/without STORAGE PLAIN, at 100k")
    parser.add_argument("--explain", type=Path, help="write EXPLAIN (ANALYZE, BUFFERS) of the fused statement here")
    parser.add_argument("--indexing-chunks", type=int, default=INDEXING_CHUNKS, help="chunks written to time indexing")
    parser.add_argument("--case-budget-s", type=float, default=40.0,
                        help="seconds per search case: timing stops after 4x this for the four cases (at least 10 queries)")
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--keep", action="store_true", help="keep the benchmark base (with --dsn)")
    args = parser.parse_args(argv)
    command = "python benchmarks/search_latency.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    if os.environ.get("PGOPTIONS"):  # server settings tried from the environment are part of the command
        command = f"PGOPTIONS={shlex.quote(os.environ['PGOPTIONS'])} {command}"
    sizes = sorted(args.chunks)
    rng = np.random.default_rng(args.seed)

    dsn = args.dsn
    if dsn is None:
        home = Path(tempfile.mkdtemp(prefix="metis-bench-"))
        atexit.register(shutil.rmtree, home, ignore_errors=True)  # runs after the server's own atexit stop
        dsn = db.embedded_dsn(home / "pgdata")
    migrate.upgrade(dsn)
    pool = db.open_pool(dsn, max_size=2)

    started = time.perf_counter()
    words = vocabulary()
    p = zipf_probabilities()
    spec = BaseSpec()
    name = f"bench-{uuid.uuid4().hex[:8]}"
    with pool.connection() as conn:
        base = storage.create_base(conn, name, "documents", spec.to_json())
        source_id = storage.ensure_source(conn, base.base_id, "bench", None)
    corpus = Corpus(base.base_id, source_id, spec.fingerprint, np.empty((0, DIM), np.float32),
                    np.empty(0, np.int64))
    queries = make_queries(rng, args.queries, words, p)

    report: dict = {"command": command, "machine": machine(), "load_average_at_start": os.getloadavg(),
                    "sizes": {}, "dim": DIM, "top_k": TOP_K,
                    "queries": args.queries, "words_per_chunk": WORDS_PER_CHUNK, "vocabulary": VOCABULARY_SIZE}
    try:
        for n in sizes:
            t0 = time.perf_counter()
            with pool.connection() as conn:
                steps = load_chunks(conn, corpus, n - corpus.chunks, words, p, rng, rebuild_indexes=args.dsn is None)
                check_tokenizer_agrees(conn, corpus.base_id)
            vacuum_analyze(dsn)
            load_s = time.perf_counter() - t0
            print(f"[{n:,} chunks loaded in {load_s:.1f} s: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in steps.items()) + "]", file=sys.stderr)
            cases = search_cases(pool, corpus, queries, args.case_budget_s)
            numpy_timings = numpy_case(corpus, queries)
            figures = {
                **cases,
                **numpy_timings,
                # Against the faster numpy: on a busy 2-core machine two BLAS threads can be far slower than one.
                "dense_over_numpy_p50": cases["dense"]["p50_ms"] / min(t["p50_ms"] for t in numpy_timings.values()),
                "dense_top10_agreement_with_numpy": dense_agreement(pool, corpus, queries),
                "bytes_per_1k_chunks": database_size(pool, n),
                "documents": corpus.documents,
                "load_s": load_s,
            }
            report["sizes"][str(n)] = figures
            if args.explain and n == sizes[-1]:
                q = max(queries[:10], key=lambda q: len(q.terms))
                text = (f"-- {command}\n-- {n} chunks, terms {q.terms}\n" + explain_fused(pool, corpus, q)
                        + f"\n\n-- same, path_prefix {FILTER_PREFIX!r}\n"
                        + explain_fused(pool, corpus, q, FILTER_PREFIX) + "\n")
                args.explain.write_text(text)
        report["indexing"] = indexing_throughput(pool, words, p, rng, args.indexing_chunks)
        if args.storage_compare:
            report["storage_compare"] = storage_compare(pool, rng, 100_000, queries)
    finally:
        if args.dsn and not args.keep:
            with pool.connection() as conn:
                storage.drop_base(conn, name)
        pool.close()
    report["wall_s"] = time.perf_counter() - started
    report["load_average_at_end"] = os.getloadavg()

    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


def print_report(report: dict) -> None:
    m = report["machine"]
    print(f"\n{report['command']}")
    print(f"{m['cpu']}, {m['nproc']} cores, Python {m['python']}, numpy {m['numpy']}; "
          f"dim {report['dim']}, top_k {report['top_k']}, {report['queries']} queries per case\n")
    print(f"{'chunks':>8} {'case':<32} {'p50 ms':>8} {'p95 ms':>8} {'n':>4}")
    labels = [("dense", "dense leg (terms=[])"), ("keyword", "keyword leg (no vector)"),
              ("fused", "fused statement"), ("fused_filtered", f"fused, path_prefix {FILTER_PREFIX} (1%)"),
              ("numpy", "numpy brute force (float32)"), ("numpy_1_thread", "numpy, 1 BLAS thread")]
    for n, f in report["sizes"].items():
        for key, label in labels:
            if key in f:
                print(f"{int(n):>8,} {label:<32} {fmt(f[key])}")
        parts = f["fused_parts_p50_ms"]
        print(f"{'':>8} fused, inside: dense {parts['dense']:.1f} / keyword {parts['keyword']:.1f} / "
              f"fuse+fetch {parts['fuse']:.1f} ms (p50)")
        print(f"{'':>8} dense / faster numpy (p50) = {f['dense_over_numpy_p50']:.2f}x; dense top-10 = numpy top-10 "
              f"{100 * f['dense_top10_agreement_with_numpy']:.0f}%; "
              f"size {f['bytes_per_1k_chunks']['total'] / 1e6:.2f} MB per 1k chunks "
              f"(postings {f['bytes_per_1k_chunks']['postings'] / 1e6:.2f}, "
              f"embeddings {f['bytes_per_1k_chunks']['embeddings'] / 1e6:.2f}, "
              f"chunks {f['bytes_per_1k_chunks']['chunks'] / 1e6:.2f})")
    i = report["indexing"]
    print(f"\nindexing without model time (storage.write_documents, {i['chunks']} chunks of "
          f"~{i['mean_chunk_chars']:.0f} chars): {i['chunks_per_s']:.0f} chunks/s")
    for row in report.get("storage_compare", []):
        print(f"storage compare 100k: {row['type']:<8} {row['storage']:<28} p50 {row['p50_ms']:.2f} ms, "
              f"p95 {row['p95_ms']:.2f} ms, {row['bytes_per_1k'] / 1e6:.2f} MB per 1k")
    start, end = report["load_average_at_start"], report["load_average_at_end"]
    print(f"\nwall time {report['wall_s']:.0f} s; load average (1 min) {start[0]:.2f} at start, {end[0]:.2f} at end")


if __name__ == "__main__":
    sys.exit(main())
