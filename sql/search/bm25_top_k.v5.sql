-- The keyword leg of sql/search/hybrid.sql, version 5 (issue 24): bm25_top_k.v4.sql over the
-- narrower posting rows of migration 0023. Created by migration 0023; released files are never
-- edited: a change is a v6 file and a migration.
--
-- What changed from v4 (the results do not: the same chunks, scores and ties):
--   - a row's tfs is NULL when every posting of the row has the term frequency max_tf (every row
--     of tier 0, where tf is 1): a posting's tf is coalesce(tfs[i], max_tf);
--   - the column tier is gone: a row's tier is that of its max_tf (0 for tf 1, 1 for 2-3, 2 for
--     4-7, 3 for 8+; every posting of a row has the same tier), so tier >= t is max_tf >= 2^t;
--   - bm25_top_k with v3's 7 arguments calls the 9-argument function with no phrase or exclusion
--     filter (v3's own body read the column tier).
--
-- bm25_top_k arguments:
--   p_base_ids        int[]     bases searched; each keeps its own statistics
--   p_terms           text[]    the question's distinct BM25 terms
--   p_term_weights    float8[]  parallel to p_terms, multiplies each term's contribution; NULL = all 1
--   p_k1, p_b         float8    BM25 parameters (SPEC: 1.2, 0.75)
--   p_leg_limit       int       rows returned
--   p_documents       bigint[]  the documents the filters keep; NULL = no filter
--   p_only_chunks     bigint[]  only these chunks may be ranked (the chunks holding the question's
--                               quoted phrases); NULL = no such filter
--   p_drop_chunks     bigint[]  these chunks are never ranked (the chunks holding an excluded
--                               word); NULL = none
-- Returns: chunk_id, score — the p_leg_limit best chunks the filters keep, best first (ties by
-- chunk_id); a score is the sum of its terms' contributions each rounded to 1e-12, added as
-- integers (exactly, in any order), so that equal scores tie. The filters only remove chunks:
-- every bound of the pruning still holds, and the top is exact.
--
-- Formula: BM25 (Robertson & Zaragoza 2009) with Lucene's non-negative idf
-- ln(1 + (N - df + 0.5) / (df + 0.5)); N, df and the average chunk length per base.
CREATE OR REPLACE FUNCTION bm25_top_k(
    p_base_ids int[], p_terms text[], p_term_weights float8[], p_k1 float8, p_b float8, p_leg_limit int,
    p_documents bigint[], p_only_chunks bigint[], p_drop_chunks bigint[]
) RETURNS TABLE (chunk_id bigint, score float8)
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SET plan_cache_mode = force_generic_plan
AS $function$
#variable_conflict use_column
BEGIN
    IF coalesce(cardinality(p_terms), 0) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
WITH
-- idf once per query term, in float8, from the few bm25_terms rows the question names.
-- A term is common when it is in more than a tenth of its base's chunks, unless it is the
-- base's rarest query term (so every base searched keeps one rare term).
query_terms AS MATERIALIZED (
    SELECT per_term.*,
           -- The most the term adds to any chunk: BM25 of its max_tf in a chunk of its min_length
           -- terms (BM25 grows with tf and falls with length; deletes never lower either, so it holds).
           per_term.idf * per_term.max_tf * (p_k1 + 1)
             / (per_term.max_tf + p_k1
                * (1 - p_b + p_b * per_term.min_length / per_term.avg_terms)) AS bound,
           per_term.df::bigint * 10 > per_term.chunk_count
             AND row_number() OVER (PARTITION BY per_term.base_id ORDER BY per_term.df, per_term.term) > 1 AS common
    FROM (
        SELECT bt.base_id, bt.term, bt.term_id, bt.df, bt.max_tf, bt.min_length, tot.chunk_count,
               -- The term's weight (p_term_weights) scales its idf, so its whole contribution.
               ln(1 + (tot.chunk_count::float8 - bt.df + 0.5) / (bt.df + 0.5)) * coalesce(qt.weight, 1) AS idf,
               greatest(tot.term_total::float8 / greatest(tot.chunk_count, 1), 1e-9) AS avg_terms
        FROM bm25_terms AS bt
        JOIN bm25_totals AS tot ON tot.base_id = ANY(p_base_ids) AND tot.base_id = bt.base_id
        LEFT JOIN unnest(p_terms, p_term_weights) AS qt(term, weight)
          ON qt.term = bt.term
        WHERE bt.base_id = ANY(p_base_ids)
          AND bt.term = ANY(p_terms)
    ) AS per_term
),
-- With a filter: the chunks it keeps, and their blocks (posting_blocks: chunk_id = block_no * 256 + offset).
allowed_chunks AS MATERIALIZED (
    SELECT c.chunk_id
    FROM chunks AS c
    WHERE NOT (p_documents IS NULL)
      AND c.base_id = ANY(p_base_ids)
      AND c.document_id IN (SELECT unnest(p_documents))
      AND (p_only_chunks IS NULL OR c.chunk_id IN (SELECT unnest(p_only_chunks)))
    UNION ALL
    -- Only a phrase's chunks (no document filter): those, from the primary key.
    SELECT c.chunk_id
    FROM chunks AS c
    WHERE p_documents IS NULL AND NOT (p_only_chunks IS NULL)
      AND c.base_id = ANY(p_base_ids)
      AND c.chunk_id IN (SELECT unnest(p_only_chunks))
),
-- The chunks holding an excluded word (a hashed NOT IN below, whatever their number).
dropped_chunks AS MATERIALIZED (
    SELECT DISTINCT d.chunk_id FROM unnest(p_drop_chunks) AS d(chunk_id)
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
               q.idf * p.tf * (p_k1 + 1)
               / (p.tf + p_k1 * (1 - p_b + p_b * bl.lengths[p.o + 1] / q.avg_terms))
           ) AS partial,
           -- The same sum in units of 1e-12, as integers, which add exactly: a score then does not
           -- depend on the order its terms were added in (equal chunks must tie exactly, so that
           -- chunk_id orders them; float8 sums in plan order differed in the last bit).
           sum(round((
               q.idf * p.tf * (p_k1 + 1)
               / (p.tf + p_k1 * (1 - p_b + p_b * bl.lengths[p.o + 1] / q.avg_terms))
           ) * 1e12)::bigint) AS exact
    FROM query_terms AS q
    JOIN posting_blocks AS pb ON pb.base_id = ANY(p_base_ids) AND pb.base_id = q.base_id AND pb.term_id = q.term_id
    JOIN block_lengths AS bl ON bl.base_id = ANY(p_base_ids) AND bl.base_id = pb.base_id AND bl.block_no = pb.block_no
    -- A block's postings; a term in one chunk of the block has no arrays (first_offset, max_tf).
    CROSS JOIN LATERAL (SELECT u.o, coalesce(u.tf, pb.max_tf) AS tf
                        FROM unnest(coalesce(pb.offsets, ARRAY[pb.first_offset]), pb.tfs) AS u(o, tf)) AS p
    WHERE NOT q.common
      AND ((p_documents IS NULL AND p_only_chunks IS NULL) OR pb.block_no::bigint * 256 + p.o IN (SELECT chunk_id FROM allowed_chunks))
      AND ((p_drop_chunks IS NULL) OR pb.block_no::bigint * 256 + p.o NOT IN (SELECT chunk_id FROM dropped_chunks))
    GROUP BY pb.base_id, pb.block_no, p.o
),
-- Pass 2: a threshold first: the 4 x leg_limit best chunks by partial score, completed exactly
-- (the common terms looked up as below); their leg_limit-th score bounds the top from below
-- (4 x: partial scores tie by the hundred, and the common terms decide among them).
rare_best AS MATERIALIZED (
    SELECT ((r.exact + coalesce(common_terms_of.part, 0)) / 1e12)::float8 AS score
    FROM (SELECT * FROM rare_scores ORDER BY partial DESC, chunk_id LIMIT 4 * p_leg_limit) AS r
    -- The common terms' contributions, looked up in the rows of the chunk's block (a LATERAL, so
    -- that each lookup is one range of the primary key; array_position scans at most 256 offsets, in C).
    LEFT JOIN LATERAL (
        SELECT sum(round((q.idf * t.tf * (p_k1 + 1)
                    / (t.tf + p_k1 * (1 - p_b + p_b * r.chunk_terms / q.avg_terms))) * 1e12)::bigint)
               AS part
        FROM query_terms AS q
        JOIN posting_blocks AS pb ON pb.base_id = ANY(p_base_ids) AND pb.base_id = r.base_id AND pb.term_id = q.term_id AND pb.block_no = r.block_no
        CROSS JOIN LATERAL (
            SELECT CASE WHEN pb.offsets IS NULL THEN CASE WHEN pb.first_offset = r.o THEN pb.max_tf END
                        WHEN pb.tfs IS NULL THEN CASE WHEN r.o = ANY(pb.offsets) THEN pb.max_tf END
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
          >= coalesce((SELECT score FROM rare_best ORDER BY score DESC OFFSET (p_leg_limit - 1) LIMIT 1), 0)
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
               ((r.exact + coalesce(common_terms_of.part, 0)) / 1e12)::float8 AS score
        FROM survivors AS r
        -- A LATERAL, so that each lookup is one range of the primary key; array_position scans at
        -- most 256 offsets, in C.
        LEFT JOIN LATERAL (
            SELECT sum(round((q.idf * t.tf * (p_k1 + 1)
                        / (t.tf + p_k1 * (1 - p_b + p_b * r.chunk_terms / q.avg_terms))) * 1e12)::bigint)
                   AS part
            FROM query_terms AS q
            JOIN posting_blocks AS pb ON pb.base_id = ANY(p_base_ids) AND pb.base_id = r.base_id AND pb.term_id = q.term_id AND pb.block_no = r.block_no
            CROSS JOIN LATERAL (
                SELECT CASE WHEN pb.offsets IS NULL THEN CASE WHEN pb.first_offset = r.o THEN pb.max_tf END
                            WHEN pb.tfs IS NULL THEN CASE WHEN r.o = ANY(pb.offsets) THEN pb.max_tf END
                            ELSE pb.tfs[array_position(pb.offsets, r.o)] END AS tf
            ) AS t
            WHERE q.base_id = r.base_id AND q.common
        ) AS common_terms_of ON true
        WHERE NOT (SELECT decode FROM survivors_many)
        UNION ALL
        -- No join: the survivors' partial scores and the decoded postings are added up per chunk
        -- in one hash aggregate, and only the survivors are kept.
        SELECT both_parts.chunk_id, (sum(both_parts.part) / 1e12)::float8 AS score
        FROM (
            SELECT r.chunk_id, r.exact::bigint AS part, true AS survivor
            FROM survivors AS r
            WHERE (SELECT decode FROM survivors_many)
            UNION ALL
            SELECT pb.block_no::bigint * 256 + p.o,
                   round((q.idf * p.tf * (p_k1 + 1)
                          / (p.tf + p_k1 * (1 - p_b + p_b * bl.lengths[p.o + 1] / q.avg_terms))) * 1e12)::bigint,
                   false
            FROM query_terms AS q
            JOIN posting_blocks AS pb ON pb.base_id = ANY(p_base_ids) AND pb.base_id = q.base_id AND pb.term_id = q.term_id
            JOIN block_lengths AS bl ON bl.base_id = ANY(p_base_ids) AND bl.base_id = pb.base_id AND bl.block_no = pb.block_no
            CROSS JOIN LATERAL (SELECT u.o, coalesce(u.tf, pb.max_tf) AS tf
                                FROM unnest(coalesce(pb.offsets, ARRAY[pb.first_offset]), pb.tfs) AS u(o, tf)) AS p
            WHERE q.common AND (SELECT decode FROM survivors_many)
              AND pb.block_no IN (SELECT block_no FROM survivors)
        ) AS both_parts
        GROUP BY both_parts.chunk_id
        HAVING bool_or(both_parts.survivor)
    ) AS scored
    ORDER BY scored.score DESC, scored.chunk_id
    LIMIT p_leg_limit
),
-- Pass 3 starts from a threshold: the leg_limit-th best of the exact scores of pass 2 and of lower
-- bounds of other chunks (seed: the postings of the top tiers, at least leg_limit postings, of each
-- base's common term with the largest bound: no chunk scores less than what they add). 0 when
-- fewer chunks were found.
seed_term AS MATERIALIZED (
    SELECT q.*,
           -- The highest tier from which down the term holds at least leg_limit postings (else 0).
           coalesce((SELECT max(per_tier.tier) FROM (
               -- A row's tier is its max_tf's: 0 for 1, 1 for 2-3, 2 for 4-7, 3 for 8+.
               SELECT per_row.tier, sum(sum(per_row.postings)) OVER (ORDER BY per_row.tier DESC) AS postings
               FROM (SELECT CASE WHEN pb.max_tf >= 8 THEN 3 WHEN pb.max_tf >= 4 THEN 2 WHEN pb.max_tf >= 2 THEN 1
                                 ELSE 0 END AS tier,
                            coalesce(cardinality(pb.offsets), 1) AS postings
                     FROM posting_blocks AS pb
                     WHERE pb.base_id = ANY(p_base_ids) AND pb.base_id = q.base_id AND pb.term_id = q.term_id
                    ) AS per_row
               GROUP BY per_row.tier) AS per_tier
             WHERE per_tier.postings >= p_leg_limit), 0) AS from_tier
    FROM (SELECT DISTINCT ON (base_id) * FROM query_terms WHERE common ORDER BY base_id, bound DESC, term) AS q
    -- Only when pass 2 found fewer than leg_limit chunks: its scores are a better threshold.
    WHERE (SELECT count(*) FROM pruned) < p_leg_limit
),
seed AS MATERIALIZED (
    SELECT pb.block_no::bigint * 256 + p.o AS chunk_id,
           sum(q.idf * p.tf * (p_k1 + 1)
               / (p.tf + p_k1 * (1 - p_b + p_b * bl.lengths[p.o + 1] / q.avg_terms))
           ) AS partial
    FROM seed_term AS q
    JOIN posting_blocks AS pb ON pb.base_id = ANY(p_base_ids) AND pb.base_id = q.base_id AND pb.term_id = q.term_id
                                 AND pb.max_tf >= (1 << q.from_tier)
    JOIN block_lengths AS bl ON bl.base_id = ANY(p_base_ids) AND bl.base_id = pb.base_id AND bl.block_no = pb.block_no
    CROSS JOIN LATERAL (SELECT u.o, coalesce(u.tf, pb.max_tf) AS tf
                        FROM unnest(coalesce(pb.offsets, ARRAY[pb.first_offset]), pb.tfs) AS u(o, tf)) AS p
    WHERE ((p_documents IS NULL AND p_only_chunks IS NULL) OR pb.block_no IN (SELECT block_no FROM allowed_blocks))
      AND ((p_documents IS NULL AND p_only_chunks IS NULL) OR pb.block_no::bigint * 256 + p.o IN (SELECT chunk_id FROM allowed_chunks))
      AND ((p_drop_chunks IS NULL) OR pb.block_no::bigint * 256 + p.o NOT IN (SELECT chunk_id FROM dropped_chunks))
    GROUP BY 1
),
threshold AS MATERIALIZED (
    SELECT coalesce((
        SELECT score FROM (
            SELECT score FROM pruned
            UNION ALL
            SELECT s.partial FROM seed AS s WHERE NOT EXISTS (SELECT 1 FROM pruned AS pr WHERE pr.chunk_id = s.chunk_id)
        ) AS known
        ORDER BY score DESC OFFSET (p_leg_limit - 1) LIMIT 1), 0) AS score
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
           sum(q.idf * p.tf * (p_k1 + 1)
               / (p.tf + p_k1 * (1 - p_b + p_b * bl.lengths[p.o + 1] / q.avg_terms))
           ) AS partial,
           sum(round((q.idf * p.tf * (p_k1 + 1)
                / (p.tf + p_k1 * (1 - p_b + p_b * bl.lengths[p.o + 1] / q.avg_terms))) * 1e12)::bigint) AS exact,
           sum(q.bound) AS read_bound,
           max(q.bound + q.others) AS all_bound
    FROM common_terms AS q
    JOIN posting_blocks AS pb ON pb.base_id = ANY(p_base_ids) AND pb.base_id = q.base_id AND pb.term_id = q.term_id
    JOIN block_lengths AS bl ON bl.base_id = ANY(p_base_ids) AND bl.base_id = pb.base_id AND bl.block_no = pb.block_no
    CROSS JOIN LATERAL (SELECT u.o, coalesce(u.tf, pb.max_tf) AS tf
                        FROM unnest(coalesce(pb.offsets, ARRAY[pb.first_offset]), pb.tfs) AS u(o, tf)) AS p
    WHERE q.essential
      AND q.idf * pb.max_tf * (p_k1 + 1)
            / (pb.max_tf + p_k1 * (1 - p_b + p_b * pb.min_length / q.avg_terms))
          + q.others >= (SELECT score FROM threshold) - 1e-9
      AND ((p_documents IS NULL AND p_only_chunks IS NULL) OR pb.block_no IN (SELECT block_no FROM allowed_blocks))
      AND ((p_documents IS NULL AND p_only_chunks IS NULL) OR pb.block_no::bigint * 256 + p.o IN (SELECT chunk_id FROM allowed_chunks))
      AND ((p_drop_chunks IS NULL) OR pb.block_no::bigint * 256 + p.o NOT IN (SELECT chunk_id FROM dropped_chunks))
    GROUP BY pb.base_id, pb.block_no, p.o
),
common_only AS MATERIALIZED (
    SELECT c.chunk_id, ((c.exact + coalesce(common_terms_of.part, 0)) / 1e12)::float8 AS score
    FROM candidates AS c
    -- The common terms' contributions, looked up in the rows of the chunk's block (a LATERAL, so
    -- that each lookup is one range of the primary key; array_position scans at most 256 offsets, in C).
    LEFT JOIN LATERAL (
        SELECT sum(round((q.idf * t.tf * (p_k1 + 1)
                    / (t.tf + p_k1 * (1 - p_b + p_b * c.chunk_terms / q.avg_terms))) * 1e12)::bigint)
               AS part
        FROM query_terms AS q
        JOIN posting_blocks AS pb ON pb.base_id = ANY(p_base_ids) AND pb.base_id = c.base_id AND pb.term_id = q.term_id AND pb.block_no = c.block_no
        CROSS JOIN LATERAL (
            SELECT CASE WHEN pb.offsets IS NULL THEN CASE WHEN pb.first_offset = c.o THEN pb.max_tf END
                        WHEN pb.tfs IS NULL THEN CASE WHEN c.o = ANY(pb.offsets) THEN pb.max_tf END
                        ELSE pb.tfs[array_position(pb.offsets, c.o)] END AS tf
        ) AS t
        WHERE q.base_id = c.base_id AND q.common AND NOT q.term_id = ANY(c.read_terms)
    ) AS common_terms_of ON true
    -- Chunks of pass 1 are scored there (exactly, or left out as unable to make the top).
    WHERE NOT EXISTS (SELECT 1 FROM rare_scores AS r WHERE r.chunk_id = c.chunk_id)
      AND c.partial + (c.all_bound - c.read_bound) >= (SELECT score FROM threshold) - 1e-9
    ORDER BY score DESC, c.chunk_id
    LIMIT p_leg_limit
)
SELECT best.chunk_id, best.score
FROM (
    SELECT pruned.chunk_id, pruned.score FROM pruned
    UNION ALL
    SELECT common_only.chunk_id, common_only.score FROM common_only
) AS best
ORDER BY best.score DESC, best.chunk_id
LIMIT p_leg_limit;
END
$function$;

-- bm25_chunk_scores: the exact BM25 of the question in each of p_chunk_ids (the complete scores of
-- the fused candidates, issue 20: a chunk the dense leg found and the keyword leg did not keep still
-- gets its BM25). The same formula, statistics and rounding as bm25_top_k: a chunk scores here what
-- it would score there. A chunk holding none of the terms scores 0.
--
-- Arguments: p_base_ids, p_terms, p_term_weights, p_k1, p_b as bm25_top_k; p_chunk_ids bigint[],
-- the chunks to score (at most leg_limit: the statement passes the dense leg's chunks the
-- keyword leg did not keep).
-- Returns: chunk_id, score, one row per chunk of p_chunk_ids found in the bases.
-- Cost: one primary-key range of posting_blocks per (chunk, term), one block_lengths row per chunk.
-- PL/pgSQL like bm25_top_k: its statement is planned once per session (a generic plan).
CREATE OR REPLACE FUNCTION bm25_chunk_scores(
    p_base_ids int[], p_terms text[], p_term_weights float8[], p_k1 float8, p_b float8, p_chunk_ids bigint[]
) RETURNS TABLE (chunk_id bigint, score float8)
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SET plan_cache_mode = force_generic_plan
AS $function$
#variable_conflict use_column
BEGIN
    IF coalesce(cardinality(p_terms), 0) = 0 OR coalesce(cardinality(p_chunk_ids), 0) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
WITH query_terms AS MATERIALIZED (
    SELECT bt.base_id, bt.term_id,
           ln(1 + (tot.chunk_count::float8 - bt.df + 0.5) / (bt.df + 0.5)) * coalesce(qt.weight, 1) AS idf,
           greatest(tot.term_total::float8 / greatest(tot.chunk_count, 1), 1e-9) AS avg_terms
    FROM bm25_terms AS bt
    JOIN bm25_totals AS tot ON tot.base_id = bt.base_id
    LEFT JOIN unnest(p_terms, p_term_weights) AS qt(term, weight) ON qt.term = bt.term
    WHERE bt.base_id = ANY(p_base_ids) AND bt.term = ANY(p_terms) AND bt.df > 0
),
asked AS MATERIALIZED (
    SELECT c.base_id, c.chunk_id, (c.chunk_id / 256)::int AS block_no, (c.chunk_id % 256)::int AS o,
           bl.lengths[(c.chunk_id % 256)::int + 1] AS chunk_terms
    FROM chunks AS c
    JOIN block_lengths AS bl ON bl.base_id = c.base_id AND bl.block_no = (c.chunk_id / 256)::int
    WHERE c.base_id = ANY(p_base_ids) AND c.chunk_id IN (SELECT unnest(p_chunk_ids))
)
SELECT a.chunk_id, (coalesce(part.exact, 0) / 1e12)::float8 AS score
FROM asked AS a
LEFT JOIN LATERAL (
    SELECT sum(round((q.idf * t.tf * (p_k1 + 1)
                / (t.tf + p_k1 * (1 - p_b + p_b * a.chunk_terms / q.avg_terms))) * 1e12)::bigint) AS exact
    FROM query_terms AS q
    JOIN posting_blocks AS pb ON pb.base_id = a.base_id AND pb.term_id = q.term_id AND pb.block_no = a.block_no
    CROSS JOIN LATERAL (
        SELECT CASE WHEN pb.offsets IS NULL THEN CASE WHEN pb.first_offset = a.o THEN pb.max_tf END
                    WHEN pb.tfs IS NULL THEN CASE WHEN a.o::smallint = ANY(pb.offsets) THEN pb.max_tf END
                    ELSE pb.tfs[array_position(pb.offsets, a.o::smallint)] END AS tf
    ) AS t
    WHERE q.base_id = a.base_id AND t.tf IS NOT NULL
) AS part ON true;
END
$function$;


-- v3's signature (7 arguments: no phrase or exclusion filter), kept for callers of v3: v4's
-- function with those two filters off.
CREATE OR REPLACE FUNCTION bm25_top_k(
    p_base_ids int[], p_terms text[], p_term_weights float8[], p_k1 float8, p_b float8, p_leg_limit int,
    p_documents bigint[]
) RETURNS TABLE (chunk_id bigint, score float8)
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
AS $function$
BEGIN
    RETURN QUERY SELECT k.chunk_id, k.score
                 FROM bm25_top_k(p_base_ids, p_terms, p_term_weights, p_k1, p_b, p_leg_limit, p_documents,
                                 NULL::bigint[], NULL::bigint[]) AS k;
END
$function$;
