-- Hybrid search: dense leg + keyword leg + reciprocal-rank fusion, ONE statement.
-- SPEC F5 (dense), F6 (BM25), F7 (RRF), F9 (modes), F10 (filters in both legs).
--
-- Modes: a NULL query_embedding switches the dense leg off (mode keyword); an
-- empty terms array switches the keyword leg off (mode dense).
--
-- Parameters:
--   %(base_ids)s        int[]    bases searched (all must share %(model)s for the dense leg)
--   %(model)s           text     embedding fingerprint ("model:dim"); vectors of other models are never compared
--   %(query_embedding)s vector   the question's embedding, or NULL
--   %(terms)s           text[]   the question's distinct BM25 terms (metis_pg.tokenizer.query_terms)
--   %(term_weights)s    float8[] parallel to %(terms)s: each term's BM25 contribution is multiplied by
--                                its weight (compound expansions weigh less); NULL = all 1.0
--   %(k1)s, %(b)s       float8   BM25 parameters (SPEC: 1.2, 0.75)
--   %(rrf_k)s           int      RRF constant (SPEC: 60)
--   %(dense_weight)s, %(keyword_weight)s  float8  weights of each leg in the fusion, >= 0, not both 0
--                       (BaseSpec defaults 1, 1; a search may override them)
--   %(leg_limit)s       int      rows kept by each leg: max(50, 4 * top_k)
--   %(top_k)s           int      fused rows returned
--   %(path_prefix)s     text     NULL = no filter; else documents whose path starts with it
--   %(kinds)s           text[]   NULL = no filter; else documents of these kinds
--   %(sources)s         text[]   NULL = no filter; else documents of these sources
--   %(unfiltered)s      boolean  true when all three filters are NULL: the legs then skip the
--                                allowed_documents semi-join (folded away in a custom plan, which
--                                also lets the dense scan run in parallel)
--
-- Formulas:
--   dense   = 1 - cosine distance (pgvector <=>), exact sequential scan, ties by chunk_id.
--   keyword = BM25 (Robertson & Zaragoza 2009) with Lucene's non-negative idf
--             ln(1 + (N - df + 0.5) / (df + 0.5)); N, df and the average chunk length are
--             per base (bm25_totals, bm25_terms), so each base keeps its own statistics.
--             Exact top leg_limit over posting blocks, with MaxScore and block-max pruning
--             (see "The keyword leg" below).
--   fused   = sum over the legs that found the chunk of weight / (rrf_k + rank), ranks from 1
--             (Cormack, Clarke & Buettcher, SIGIR 2009).
--
-- Returns, best first: chunk_id, dense, dense_rank, keyword, keyword_rank, fused, the
-- citation columns, holds (NULL unless the chunk is a fact of a memory base, SPEC F11:
-- true while no newer fact replaced it), and four timestamps (started_at, dense_done_at, keyword_done_at,
-- finished_at) from which the caller derives the time each step took: each leg is
-- MATERIALIZED, so they run one after the other and each stamps the moment it ended.
WITH allowed_documents AS MATERIALIZED (
    SELECT d.document_id
    FROM documents AS d
    JOIN sources AS s ON s.source_id = d.source_id
    WHERE d.base_id = ANY(%(base_ids)s::int[])
      AND (%(path_prefix)s::text IS NULL OR starts_with(d.path, %(path_prefix)s::text))
      AND (%(kinds)s::text[] IS NULL OR d.kind = ANY(%(kinds)s::text[]))
      AND (%(sources)s::text[] IS NULL OR s.name = ANY(%(sources)s::text[]))
),
dense AS MATERIALIZED (
    SELECT nearest.chunk_id,
           1 - nearest.distance AS score,
           row_number() OVER (ORDER BY nearest.distance, nearest.chunk_id) AS rank,
           clock_timestamp() AS done_at
    FROM (
        SELECT scanned.chunk_id, scanned.distance
        FROM (
            -- Without a filter: every vector of the bases (a parallel sequential scan).
            SELECT e.chunk_id, e.embedding <=> %(query_embedding)s::halfvec AS distance
            FROM embeddings AS e
            WHERE %(query_embedding)s::halfvec IS NOT NULL AND %(unfiltered)s::boolean
              AND e.base_id = ANY(%(base_ids)s::int[])
              AND e.model = %(model)s::text
            UNION ALL
            -- With a filter: the allowed documents' vectors only. A separate branch, so that the
            -- IN becomes a semi-join the planner may run on ix_embeddings_document.
            SELECT e.chunk_id, e.embedding <=> %(query_embedding)s::halfvec AS distance
            FROM embeddings AS e
            WHERE %(query_embedding)s::halfvec IS NOT NULL AND NOT %(unfiltered)s::boolean
              AND e.base_id = ANY(%(base_ids)s::int[])
              AND e.model = %(model)s::text
              AND e.document_id IN (SELECT document_id FROM allowed_documents)
        ) AS scanned
        ORDER BY scanned.distance, scanned.chunk_id
        LIMIT %(leg_limit)s
    ) AS nearest
),
-- idf once per query term, in float8, from the few bm25_terms rows the question names.
-- max_score = idf * (k1 + 1) bounds what one term can add to a chunk (tf / (tf + K) < 1 for
-- k1 >= 0 and 0 <= b <= 1, which BaseSpec enforces).
-- A term is common when it is in more than a tenth of its base's chunks, unless it is the
-- base's rarest query term (so every base searched keeps one rare term).
query_terms AS MATERIALIZED (
    SELECT per_term.*,
           per_term.idf * (%(k1)s::float8 + 1) AS max_score,
           -- The most the term adds to any chunk: BM25 of its max_tf in a chunk of its min_length
           -- terms (BM25 grows with tf and falls with length; deletes never lower either, so it holds).
           per_term.idf * per_term.max_tf * (%(k1)s::float8 + 1)
             / (per_term.max_tf + %(k1)s::float8
                * (1 - %(b)s::float8 + %(b)s::float8 * per_term.min_length / per_term.avg_terms)) AS bound,
           per_term.df::bigint * 10 > per_term.chunk_count
             AND row_number() OVER (PARTITION BY per_term.base_id ORDER BY per_term.df, per_term.term) > 1 AS common
    FROM (
        SELECT bt.base_id, bt.term, bt.term_id, bt.df, bt.max_tf, bt.min_length, tot.chunk_count,
               -- The term's weight (%(term_weights)s) scales its idf, so its whole contribution.
               ln(1 + (tot.chunk_count::float8 - bt.df + 0.5) / (bt.df + 0.5)) * coalesce(qt.weight, 1) AS idf,
               greatest(tot.term_total::float8 / greatest(tot.chunk_count, 1), 1e-9) AS avg_terms
        FROM bm25_terms AS bt
        JOIN bm25_totals AS tot ON tot.base_id = bt.base_id
        LEFT JOIN unnest(%(terms)s::text[], %(term_weights)s::float8[]) AS qt(term, weight)
          ON qt.term = bt.term
        WHERE bt.base_id = ANY(%(base_ids)s::int[])
          AND bt.term = ANY(%(terms)s::text[])
    ) AS per_term
),
-- With a filter: the chunks it keeps, and their blocks (posting_blocks: chunk_id = block_no * 256 + offset).
allowed_chunks AS MATERIALIZED (
    SELECT c.chunk_id
    FROM chunks AS c
    WHERE NOT %(unfiltered)s::boolean
      AND c.base_id = ANY(%(base_ids)s::int[])
      AND c.document_id IN (SELECT document_id FROM allowed_documents)
),
allowed_blocks AS MATERIALIZED (
    SELECT DISTINCT (chunk_id / 256)::int AS block_no FROM allowed_chunks
),
-- The keyword leg is exact top-k BM25 (Robertson & Zaragoza 2009) over posting blocks: a term's
-- postings in 256 consecutive chunk ids and one tier of term frequency (1, 2-3, 4-7, 8+), with the
-- row's max_tf and min_length, from which BM25 bounds what the term adds to any chunk of the row
-- (it grows with tf and falls with length). Three passes, each pruned by bounds (MaxScore, Turtle &
-- Flood 1995; block-max bounds, Ding & Suel 2011, here per block and tier):
--   1. rare terms: all their postings are read;
--   2. their chunks that can still make the top get the common terms' contributions, looked up;
--   3. chunks holding common terms only: read only from the rows whose bound, plus what the
--      question's other common terms can add at most, reaches the leg_limit-th score found.
-- Pass 1: every chunk holding a rare term (that the filters keep), scored on its rare terms.
rare_scores AS MATERIALIZED (
    SELECT pb.base_id, pb.block_no, p.o, pb.block_no::bigint * 256 + p.o AS chunk_id,
           max(bl.lengths[p.o + 1]) AS chunk_terms,
           sum(
               q.idf * p.tf * (%(k1)s::float8 + 1)
               / (p.tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * bl.lengths[p.o + 1] / q.avg_terms))
           ) AS partial
    FROM query_terms AS q
    JOIN posting_blocks AS pb ON pb.base_id = q.base_id AND pb.term_id = q.term_id
    JOIN block_lengths AS bl ON bl.base_id = pb.base_id AND bl.block_no = pb.block_no
    -- A block's postings; a term in one chunk of the block has no arrays (first_offset, max_tf).
    CROSS JOIN LATERAL unnest(coalesce(pb.offsets, ARRAY[pb.first_offset]),
                              coalesce(pb.tfs, ARRAY[pb.max_tf])) AS p(o, tf)
    WHERE NOT q.common
      AND (%(unfiltered)s::boolean OR pb.block_no::bigint * 256 + p.o IN (SELECT chunk_id FROM allowed_chunks))
    GROUP BY pb.base_id, pb.block_no, p.o
),
-- Pass 2: a threshold first: the 4 x leg_limit best chunks by partial score, completed exactly
-- (the common terms looked up as below); their leg_limit-th score bounds the top from below
-- (4 x: partial scores tie by the hundred, and the common terms decide among them).
rare_best AS MATERIALIZED (
    SELECT round((r.partial + coalesce(common_terms_of.part, 0))::numeric, 12)::float8 AS score
    FROM (SELECT * FROM rare_scores ORDER BY partial DESC, chunk_id LIMIT 4 * %(leg_limit)s) AS r
    -- The common terms' contributions, looked up in the rows of the chunk's block (a LATERAL, so
    -- that each lookup is one range of the primary key; array_position scans at most 256 offsets, in C).
    LEFT JOIN LATERAL (
        SELECT sum(q.idf * t.tf * (%(k1)s::float8 + 1)
                   / (t.tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * r.chunk_terms / q.avg_terms)))
               AS part
        FROM query_terms AS q
        JOIN posting_blocks AS pb ON pb.base_id = r.base_id AND pb.term_id = q.term_id AND pb.block_no = r.block_no
        CROSS JOIN LATERAL (
            SELECT CASE WHEN pb.offsets IS NULL THEN CASE WHEN pb.first_offset = r.o THEN pb.max_tf END
                        ELSE pb.tfs[array_position(pb.offsets, r.o)] END AS tf
        ) AS t
        WHERE q.base_id = r.base_id AND q.common
    ) AS common_terms_of ON true
),
-- Then the candidates whose partial score plus every common term's bound can still reach that
-- threshold get their common terms' contributions.
survivors AS MATERIALIZED (
    SELECT r.*
    FROM rare_scores AS r
    WHERE r.partial + (SELECT coalesce(max(per_base.bound), 0)
                       FROM (SELECT sum(bound) AS bound FROM query_terms WHERE common GROUP BY base_id) AS per_base)
          >= coalesce((SELECT score FROM rare_best ORDER BY score DESC OFFSET (%(leg_limit)s - 1) LIMIT 1), 0)
             - 1e-9
),
-- Few survivors: each term looked up in the rows of the chunk's block (a few microseconds each).
-- Many: cheaper to read the common terms' rows of their blocks once (below a lookup per 8
-- postings read).
survivors_many AS MATERIALIZED (
    SELECT (SELECT count(*) FROM survivors) * (SELECT count(*) FROM query_terms WHERE common) * 8
           > (SELECT coalesce(sum(df), 0) FROM query_terms WHERE common) AS decode
),
pruned AS MATERIALIZED (
    SELECT scored.chunk_id, scored.score
    FROM (
        SELECT r.chunk_id,
               -- Rounded to 12 decimals: the order in which the terms are added depends on the plan,
               -- and equal scores must tie exactly so that chunk_id breaks the tie.
               round((r.partial + coalesce(common_terms_of.part, 0))::numeric, 12)::float8 AS score
        FROM survivors AS r
        -- A LATERAL, so that each lookup is one range of the primary key; array_position scans at
        -- most 256 offsets, in C.
        LEFT JOIN LATERAL (
            SELECT sum(q.idf * t.tf * (%(k1)s::float8 + 1)
                       / (t.tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * r.chunk_terms / q.avg_terms)))
                   AS part
            FROM query_terms AS q
            JOIN posting_blocks AS pb ON pb.base_id = r.base_id AND pb.term_id = q.term_id AND pb.block_no = r.block_no
            CROSS JOIN LATERAL (
                SELECT CASE WHEN pb.offsets IS NULL THEN CASE WHEN pb.first_offset = r.o THEN pb.max_tf END
                            ELSE pb.tfs[array_position(pb.offsets, r.o)] END AS tf
            ) AS t
            WHERE q.base_id = r.base_id AND q.common
        ) AS common_terms_of ON true
        WHERE NOT (SELECT decode FROM survivors_many)
        UNION ALL
        -- No join: the survivors' partial scores and the decoded postings are added up per chunk
        -- in one hash aggregate, and only the survivors are kept.
        SELECT both_parts.chunk_id, round(sum(both_parts.part)::numeric, 12)::float8 AS score
        FROM (
            SELECT r.chunk_id, r.partial AS part, true AS survivor
            FROM survivors AS r
            WHERE (SELECT decode FROM survivors_many)
            UNION ALL
            SELECT pb.block_no::bigint * 256 + p.o,
                   q.idf * p.tf * (%(k1)s::float8 + 1)
                   / (p.tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * bl.lengths[p.o + 1] / q.avg_terms)),
                   false
            FROM query_terms AS q
            JOIN posting_blocks AS pb ON pb.base_id = q.base_id AND pb.term_id = q.term_id
            JOIN block_lengths AS bl ON bl.base_id = pb.base_id AND bl.block_no = pb.block_no
            CROSS JOIN LATERAL unnest(coalesce(pb.offsets, ARRAY[pb.first_offset]),
                                      coalesce(pb.tfs, ARRAY[pb.max_tf])) AS p(o, tf)
            WHERE q.common AND (SELECT decode FROM survivors_many)
              AND pb.block_no IN (SELECT block_no FROM survivors)
        ) AS both_parts
        GROUP BY both_parts.chunk_id
        HAVING bool_or(both_parts.survivor)
    ) AS scored
    ORDER BY scored.score DESC, scored.chunk_id
    LIMIT %(leg_limit)s
),
-- Pass 3 starts from a threshold: the leg_limit-th best of the exact scores of pass 2 and of lower
-- bounds of other chunks (seed: the postings of the top tiers, at least leg_limit postings, of each
-- base's common term with the largest bound: no chunk scores less than what they add). 0 when
-- fewer chunks were found.
seed_term AS MATERIALIZED (
    SELECT q.*,
           -- The highest tier from which down the term holds at least leg_limit postings (else 0).
           coalesce((SELECT max(per_tier.tier) FROM (
               SELECT pb.tier, sum(sum(coalesce(cardinality(pb.offsets), 1))) OVER (ORDER BY pb.tier DESC) AS postings
               FROM posting_blocks AS pb
               WHERE pb.base_id = q.base_id AND pb.term_id = q.term_id
               GROUP BY pb.tier) AS per_tier
             WHERE per_tier.postings >= %(leg_limit)s), 0) AS from_tier
    FROM (SELECT DISTINCT ON (base_id) * FROM query_terms WHERE common ORDER BY base_id, bound DESC, term) AS q
    -- Only when pass 2 found fewer than leg_limit chunks: its scores are a better threshold.
    WHERE (SELECT count(*) FROM pruned) < %(leg_limit)s
),
seed AS MATERIALIZED (
    SELECT pb.block_no::bigint * 256 + p.o AS chunk_id,
           sum(q.idf * p.tf * (%(k1)s::float8 + 1)
               / (p.tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * bl.lengths[p.o + 1] / q.avg_terms))
           ) AS partial
    FROM seed_term AS q
    JOIN posting_blocks AS pb ON pb.base_id = q.base_id AND pb.term_id = q.term_id AND pb.tier >= q.from_tier
    JOIN block_lengths AS bl ON bl.base_id = pb.base_id AND bl.block_no = pb.block_no
    CROSS JOIN LATERAL unnest(coalesce(pb.offsets, ARRAY[pb.first_offset]),
                              coalesce(pb.tfs, ARRAY[pb.max_tf])) AS p(o, tf)
    WHERE (%(unfiltered)s::boolean OR pb.block_no IN (SELECT block_no FROM allowed_blocks))
      AND (%(unfiltered)s::boolean OR pb.block_no::bigint * 256 + p.o IN (SELECT chunk_id FROM allowed_chunks))
    GROUP BY 1
),
threshold AS MATERIALIZED (
    SELECT coalesce((
        SELECT score FROM (
            SELECT score FROM pruned
            UNION ALL
            SELECT s.partial FROM seed AS s WHERE NOT EXISTS (SELECT 1 FROM pruned AS pr WHERE pr.chunk_id = s.chunk_id)
        ) AS known
        ORDER BY score DESC OFFSET (%(leg_limit)s - 1) LIMIT 1), 0) AS score
),
-- Per common term: what the base's other common terms add at most (others), and whether a chunk
-- can reach the threshold without it (MaxScore: terms taken by increasing bound, those whose
-- bounds add up to less than the threshold are not essential, and no chunk holding only those
-- can make the top, so their postings only ever get looked up).
common_terms AS MATERIALIZED (
    SELECT q.*,
           sum(q.bound) OVER (PARTITION BY q.base_id) - q.bound AS others,
           sum(q.bound) OVER (PARTITION BY q.base_id ORDER BY q.bound, q.term)
             >= (SELECT score FROM threshold) - 1e-9 AS essential
    FROM query_terms AS q
    WHERE q.common
),
-- Pass 3: chunks holding common terms only. A row of an essential term is read when its bound
-- plus the others' can reach the threshold: a chunk none of whose rows is read has a score below
-- it (each of its terms' rows failed: its row bound + the others' bounds < threshold). What the
-- rows read give is a partial score; chunks whose partial score plus the bounds of their terms
-- not read can reach the threshold get those terms looked up, as in pass 2.
candidates AS MATERIALIZED (
    SELECT pb.base_id, pb.block_no, p.o, pb.block_no::bigint * 256 + p.o AS chunk_id,
           max(bl.lengths[p.o + 1]) AS chunk_terms,
           array_agg(q.term_id) AS read_terms,
           sum(q.idf * p.tf * (%(k1)s::float8 + 1)
               / (p.tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * bl.lengths[p.o + 1] / q.avg_terms))
           ) AS partial,
           sum(q.bound) AS read_bound,
           max(q.bound + q.others) AS all_bound
    FROM common_terms AS q
    JOIN posting_blocks AS pb ON pb.base_id = q.base_id AND pb.term_id = q.term_id
    JOIN block_lengths AS bl ON bl.base_id = pb.base_id AND bl.block_no = pb.block_no
    CROSS JOIN LATERAL unnest(coalesce(pb.offsets, ARRAY[pb.first_offset]),
                              coalesce(pb.tfs, ARRAY[pb.max_tf])) AS p(o, tf)
    WHERE q.essential
      AND q.idf * pb.max_tf * (%(k1)s::float8 + 1)
            / (pb.max_tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * pb.min_length / q.avg_terms))
          + q.others >= (SELECT score FROM threshold) - 1e-9
      AND (%(unfiltered)s::boolean OR pb.block_no IN (SELECT block_no FROM allowed_blocks))
      AND (%(unfiltered)s::boolean OR pb.block_no::bigint * 256 + p.o IN (SELECT chunk_id FROM allowed_chunks))
    GROUP BY pb.base_id, pb.block_no, p.o
),
common_only AS MATERIALIZED (
    SELECT c.chunk_id, round((c.partial + coalesce(common_terms_of.part, 0))::numeric, 12)::float8 AS score
    FROM candidates AS c
    -- The common terms' contributions, looked up in the rows of the chunk's block (a LATERAL, so
    -- that each lookup is one range of the primary key; array_position scans at most 256 offsets, in C).
    LEFT JOIN LATERAL (
        SELECT sum(q.idf * t.tf * (%(k1)s::float8 + 1)
                   / (t.tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * c.chunk_terms / q.avg_terms)))
               AS part
        FROM query_terms AS q
        JOIN posting_blocks AS pb ON pb.base_id = c.base_id AND pb.term_id = q.term_id AND pb.block_no = c.block_no
        CROSS JOIN LATERAL (
            SELECT CASE WHEN pb.offsets IS NULL THEN CASE WHEN pb.first_offset = c.o THEN pb.max_tf END
                        ELSE pb.tfs[array_position(pb.offsets, c.o)] END AS tf
        ) AS t
        WHERE q.base_id = c.base_id AND q.common AND NOT q.term_id = ANY(c.read_terms)
    ) AS common_terms_of ON true
    -- Chunks of pass 1 are scored there (exactly, or left out as unable to make the top).
    WHERE NOT EXISTS (SELECT 1 FROM rare_scores AS r WHERE r.chunk_id = c.chunk_id)
      AND c.partial + (c.all_bound - c.read_bound) >= (SELECT score FROM threshold) - 1e-9
    ORDER BY score DESC, c.chunk_id
    LIMIT %(leg_limit)s
),
keyword AS MATERIALIZED (
    SELECT best.chunk_id,
           best.score,
           row_number() OVER (ORDER BY best.score DESC, best.chunk_id) AS rank,
           clock_timestamp() AS done_at
    FROM (
        SELECT chunk_id, score FROM pruned
        UNION ALL
        SELECT chunk_id, score FROM common_only
        ORDER BY score DESC, chunk_id
        LIMIT %(leg_limit)s
    ) AS best
),
fused AS (
    SELECT coalesce(d.chunk_id, k.chunk_id) AS chunk_id,
           d.score AS dense,
           d.rank AS dense_rank,
           k.score AS keyword,
           k.rank AS keyword_rank,
           coalesce(%(dense_weight)s::float8 / (%(rrf_k)s::int + d.rank), 0)
             + coalesce(%(keyword_weight)s::float8 / (%(rrf_k)s::int + k.rank), 0) AS fused
    FROM dense AS d
    FULL OUTER JOIN keyword AS k ON k.chunk_id = d.chunk_id
    ORDER BY fused DESC, chunk_id
    LIMIT %(top_k)s
),
legs_done AS (
    SELECT (SELECT max(done_at) FROM dense) AS dense_done_at,
           (SELECT max(done_at) FROM keyword) AS keyword_done_at
)
SELECT f.chunk_id, f.dense, f.dense_rank, f.keyword, f.keyword_rank, f.fused,
       c.text, c.title, c.headings, c.page, c.line, c.char_start, c.char_end, c.line_end, c.line_map,
       doc.document_id, doc.path AS document, doc.kind, src.name AS source, b.name AS base,
       CASE WHEN fa.document_id IS NULL THEN NULL ELSE fa.superseded_by IS NULL END AS holds,
       statement_timestamp() AS started_at, legs_done.dense_done_at, legs_done.keyword_done_at,
       clock_timestamp() AS finished_at
-- Every join carries base_id (the distribution column under Citus, docs/scaling.md): with one
-- base searched, each table is read on one shard and the statement is a router query.
FROM fused AS f
JOIN chunks AS c ON c.base_id = ANY(%(base_ids)s::int[]) AND c.chunk_id = f.chunk_id
JOIN documents AS doc ON doc.base_id = c.base_id AND doc.document_id = c.document_id
JOIN sources AS src ON src.source_id = doc.source_id
JOIN bases AS b ON b.base_id = doc.base_id
LEFT JOIN facts AS fa ON fa.base_id = doc.base_id AND fa.document_id = doc.document_id
CROSS JOIN legs_done
ORDER BY f.fused DESC, f.chunk_id
