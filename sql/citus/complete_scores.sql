-- The complete keyword scores of the hybrid statement on Citus (issue 20, issue 22): the statement
-- bm25_chunk_scores (sql/search/bm25_top_k.v5.sql) runs, written without its LATERAL outer join,
-- which Citus refuses in a statement it distributes ("cannot perform a lateral outer join when a
-- distributed subquery references complex subqueries"). metis_pg.retrieval.hybrid_statement puts
-- it in place of that function's call; the same formula, statistics and rounding, so a chunk scores
-- here what it scores there (tests/test_citus.py compares them).
--
-- Parameters: those of hybrid.sql (base_ids, terms, term_weights, k1, b); the chunks scored are the
-- dense leg's that the keyword leg did not keep (its CTEs dense and keyword).
-- Returns: chunk_id, score, one row per such chunk; 0 for a chunk holding none of the terms.
WITH query_terms AS MATERIALIZED (
    SELECT bt.base_id, bt.term_id,
           ln(1 + (tot.chunk_count::float8 - bt.df + 0.5) / (bt.df + 0.5)) * coalesce(qt.weight, 1) AS idf,
           greatest(tot.term_total::float8 / greatest(tot.chunk_count, 1), 1e-9) AS avg_terms
    FROM bm25_terms AS bt
    JOIN bm25_totals AS tot ON tot.base_id = bt.base_id
    LEFT JOIN unnest(%(terms)s::text[], %(term_weights)s::float8[]) AS qt(term, weight) ON qt.term = bt.term
    WHERE bt.base_id = ANY(%(base_ids)s::int[]) AND tot.base_id = ANY(%(base_ids)s::int[])
      AND bt.term = ANY(%(terms)s::text[]) AND bt.df > 0
),
asked AS MATERIALIZED (
    SELECT c.base_id, c.chunk_id, (c.chunk_id / 256)::int AS block_no, (c.chunk_id %% 256)::int AS o,
           bl.lengths[(c.chunk_id %% 256)::int + 1] AS chunk_terms
    FROM chunks AS c
    JOIN block_lengths AS bl ON bl.base_id = c.base_id AND bl.block_no = (c.chunk_id / 256)::int
    WHERE c.base_id = ANY(%(base_ids)s::int[]) AND bl.base_id = ANY(%(base_ids)s::int[])
      AND c.chunk_id IN (SELECT d.chunk_id FROM dense AS d WHERE d.chunk_id NOT IN (SELECT chunk_id FROM keyword))
),
postings AS MATERIALIZED (
    SELECT a.chunk_id, q.idf, q.avg_terms, a.chunk_terms,
           CASE WHEN pb.offsets IS NULL THEN CASE WHEN pb.first_offset = a.o THEN pb.max_tf END
                -- No tfs: every posting of the row has the tf max_tf (migration 0023).
                WHEN pb.tfs IS NULL THEN CASE WHEN a.o::smallint = ANY(pb.offsets) THEN pb.max_tf END
                ELSE pb.tfs[array_position(pb.offsets, a.o::smallint)] END AS tf
    FROM asked AS a
    JOIN query_terms AS q ON q.base_id = a.base_id
    JOIN posting_blocks AS pb ON pb.base_id = a.base_id AND pb.term_id = q.term_id AND pb.block_no = a.block_no
    WHERE pb.base_id = ANY(%(base_ids)s::int[])
),
parts AS MATERIALIZED (
    SELECT p.chunk_id,
           sum(round((p.idf * p.tf * (%(k1)s::float8 + 1)
               / (p.tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * p.chunk_terms / p.avg_terms))) * 1e12)::bigint) AS exact
    FROM postings AS p
    WHERE p.tf IS NOT NULL
    GROUP BY p.chunk_id
)
SELECT a.chunk_id, (coalesce(parts.exact, 0) / 1e12)::float8 AS score
FROM asked AS a
LEFT JOIN parts ON parts.chunk_id = a.chunk_id
