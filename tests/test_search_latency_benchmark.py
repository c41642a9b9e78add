"""benchmarks/search_latency.py (issue 10) on a tiny corpus: the JSON keys of the issue, loading through
the real write path on whatever schema the migrations made, the size of every table with a base_id,
and the topics corpus. The speed figures themselves are printed by the benchmark, never asserted."""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import search_latency

ISSUE_KEYS = ("chunks", "dense_p50_ms", "dense_p95_ms", "keyword_p50_ms", "keyword_p95_ms", "fused_p50_ms",
              "fused_p95_ms", "filtered_p50_ms", "filtered_p95_ms", "tagged_p50_ms", "tagged_p95_ms", "broad_p50_ms", "broad_p95_ms",
              "every_p50_ms", "every_p95_ms", "numpy_p50_ms", "indexing_chunks_per_s",
              "mb_per_1k_chunks")


def _bench_bases(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM bases WHERE name LIKE 'bench-%'")]


def test_one_run_writes_the_issue_keys_for_one_base_and_one_base_of_three(dsn, tmp_path):
    out = tmp_path / "figures.json"
    before = _bench_bases(dsn)
    search_latency.main(["--dsn", dsn, "--chunks", "300", "--bases", "3", "--queries", "10",
                         "--case-budget-s", "0.1", "--indexing-chunks", "30", "--load-batch-chunks", "120",
                         "--json", str(out)])
    report = json.loads(out.read_text())
    for figures in (report, report["bases_3"]):
        for key in ISSUE_KEYS:
            assert isinstance(figures[key], (int, float)) and math.isfinite(figures[key]) and figures[key] > 0, key
        assert figures["chunks"] == 300
        assert {"chunks", "embeddings", "documents"} <= set(figures["details"]["size"]["tables"])
    three = report["bases_3"]
    assert three["three_bases_p50_ms"] > 0 and three["three_bases_p95_ms"] >= three["three_bases_p50_ms"]
    assert three["three_bases_count"] == 3 and three["details"]["cases"]["three_bases"]["n"] >= 10
    # The load went through write_documents: every chunk written is there, searchable by the dense leg.
    assert report["details"]["load"]["chunks"] == 300
    assert report["details"]["dense_top10_agreement_with_numpy"] == 1.0
    assert report["details"]["load"]["load_chunks_per_s"] > 0
    assert set(report["load_avg"]) == {"start", "end"} and len(report["load_avg"]["start"]) == 3
    assert report["git_commit"] != ""
    assert _bench_bases(dsn) == before  # with --dsn the benchmark drops its bases


def test_sizes_count_every_table_with_a_base_id_partitions_included(dsn):
    with psycopg.connect(dsn) as conn:  # rolled back at the end: the table never exists for other tests
        conn.execute("CREATE TABLE bench_blocks (base_id int, payload text) PARTITION BY LIST (base_id)")
        conn.execute("CREATE TABLE bench_blocks_1 PARTITION OF bench_blocks FOR VALUES IN (1)")
        conn.execute("CREATE TABLE bench_blocks_2 PARTITION OF bench_blocks FOR VALUES IN (2)")
        conn.execute("CREATE TABLE bench_no_base (x int)")
        conn.execute("INSERT INTO bench_blocks SELECT 1 + i % 2, repeat('x', 200) FROM generate_series(1, 5000) i")
        conn.execute("CREATE INDEX ON bench_blocks (base_id)")
        sizes = search_latency.table_sizes(conn)
        relations = search_latency.relation_sizes(conn)
        indexes = {"bench_blocks": {r[0] for r in conn.execute(
            "SELECT i.indexrelid::regclass::text FROM pg_index AS i"
            " WHERE i.indrelid IN ('bench_blocks_1'::regclass, 'bench_blocks_2'::regclass)")}}
        parts = sum(conn.execute("SELECT pg_total_relation_size(%s::regclass)", (t,)).fetchone()[0]
                    for t in ("bench_blocks_1", "bench_blocks_2"))
        conn.rollback()
    assert sizes["bench_blocks"] == parts > 1_000_000
    assert "bench_blocks_1" not in sizes and "bench_no_base" not in sizes  # partitions once, via their parent
    assert {"chunks", "embeddings", "documents", "bm25_terms"} <= set(sizes)
    assert sizes["chunks"] > 0
    # The split per relation (table, TOAST, each index) adds up to the table's size (bench_blocks: no
    # other session sees it, so no autovacuum grows its maps between the two reads).
    assert sum(b for r, b in relations.items() if r in ("bench_blocks (table)", "bench_blocks (TOAST)")
               or r in indexes["bench_blocks"]) == sizes["bench_blocks"]
    assert relations["bench_blocks (table)"] > 1_000_000 and len(indexes["bench_blocks"]) == 2  # one per partition
    assert {"chunks (table)", "chunks (TOAST)", "pk_posting_blocks"} <= set(relations)


def test_topics_corpus_has_bursty_topic_words_and_varied_chunk_lengths():
    words = search_latency.Words.make()
    docs = list(search_latency.topic_documents(np.random.default_rng(7), words, 3000))
    assert sum(len(d.chunks) for d in docs) == 3000
    lengths = [len(c) for d in docs for c in d.chunks]
    low, high = search_latency.CHUNK_WORDS_RANGE
    assert min(lengths) >= low and max(lengths) <= high and len(set(lengths)) > 100
    repeated = 0
    for d in docs:
        assert 1 <= len(d.topics) <= 3
        assert all(search_latency.TOPIC_BAND[0] <= t < search_latency.TOPIC_BAND[1] for t in d.topics)
        counts = [Counter(c.tolist()) for c in d.chunks]
        repeated += any(c[t] > 1 for c in counts for t in d.topics)
    assert repeated > 0.8 * len(docs)  # topic words recur inside a chunk in most documents
    corpus = search_latency.Corpus("x", 0, 0, "m", np.empty((0, 384)), np.empty(0), topics=[d.topics for d in docs])
    queries = search_latency.topic_queries(np.random.default_rng(1), 50, words, corpus)
    topic_words = {words.words[t] for d in docs for t in d.topics}
    assert all(any(term in topic_words for term in q.terms) and len(q.terms) >= 2 for q in queries)
