-- Hybrid search: dense leg + keyword leg + fusion of their complete scores, ONE statement.
-- SPEC F5 (dense), F6 (BM25), F7 (RRF), F9 (modes), F10 (filters in both legs); issue 20 (complete
-- scores, convex combination, routing, phrases and exclusions).
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
--   %(asked_terms)s     text[]   the question's own terms (no compound): routing's share of absent words
--   %(k1)s, %(b)s       float8   BM25 parameters (SPEC: 1.2, 0.75)
--   %(fusion)s          text     'rrf' (weighted reciprocal rank) or 'convex' (of normalized scores)
--   %(normalization)s   text     convex only: 'minmax' (over the candidates), 'tmm' (theoretical min) or
--                                'z' (each leg's own list)
--   %(rrf_k)s           int      RRF constant (SPEC: 60)
--   %(weight_sum)s      float8   rrf: dense_weight + keyword_weight (> 0)
--   %(dense_share)s     float8   the dense leg's share in [0, 1] before the statement's own routing:
--                                rrf weights are weight_sum * share and weight_sum * (1 - share);
--                                convex alpha = share (metis_pg.fusion, metis_pg.routing)
--   %(route_absent)s    float8   added to the share times the share of asked_terms no chunk holds
--   %(route_weak)s      float8   added to the share when the best BM25 is below %(weak_ratio)s of its bound
--   %(weak_ratio)s      float8   see route_weak
--   %(leg_limit)s       int      rows kept by each leg: max(50, 4 * top_k)
--   %(collapse_copies)s boolean  in each leg, the chunks of one text (chunks.text) take one place, held by
--                                the copy that still holds (SPEC F11), then the best-ranked (issue 20:
--                                copies of one text, such as an option documented alike in many pages,
--                                crowd a leg's list)
--   %(leg_read)s        int      rows the dense leg reads before copies are dropped: leg_limit, or
--                                leg_limit * metis_pg.retrieval.COPIES_READ with collapse_copies (the
--                                keyword leg drops them from its exact top leg_limit: reading more
--                                loosens BM25's pruning, 18 per cent slower, and gained nothing measured)
--   %(top_k)s           int      fused rows returned
--   %(mark_terms)s      text[]   the question's terms whose statistics each row carries for its snippet's
--                                marks (metis_pg.snippets.weighing_terms); NULL or empty: none
--   %(path_prefix)s     text     NULL = no filter; else documents whose path starts with it
--   %(kinds)s           text[]   NULL = no filter; else documents of these kinds
--   %(sources)s         text[]   NULL = no filter; else documents of these sources
--   %(exclude_prefixes)s text[] NULL = no filter; else documents whose path starts with none of them
--   %(tags_any)s, %(tags_all)s, %(exclude_tags)s  text[]  NULL = no filter; else documents with one /
--                                every / none of these tags (lower case, as stored)
--   %(authors)s, %(categories)s  text[]  NULL = no filter; else documents of one of these
--   %(since)s, %(until)s timestamptz  NULL = no bound; else documents whose date (else the file's
--                                modification time) is >= since and < until (undated ones are dropped)
--   %(meta)s            jsonb    NULL = no filter; else [[alternative, ...], ...]: the document's meta
--                                contains one alternative of every requirement (retrieval.Filters.meta)
--   %(unfiltered)s      boolean  true when every filter is NULL: the legs then skip the
--                                allowed_documents semi-join (folded away in a custom plan, which
--                                also lets the dense scan run in parallel)
--   %(only_chunks)s     bigint[] NULL = no phrase; else only these chunks are ranked (those holding
--                                every quoted phrase of the question, found by metis_pg.query)
--   %(exclude_terms)s   text[]   NULL = none; else chunks holding any of these terms are never ranked
--   %(restricted)s      boolean  true when the statement runs on behalf of principals in bases where
--                                documents may have readers (metis_pg.retrieval.restricted): the keyword
--                                leg then never ranks the chunks they may not read (metis_hidden_chunks,
--                                sql/access/functions.v1.sql); every other read is under row-level
--                                security already (the dense leg's vectors, chunks, documents)
--
-- Formulas:
--   dense   = 1 - cosine distance (pgvector <=>), exact sequential scan, ties by chunk_id.
--   keyword = BM25 (Robertson & Zaragoza 2009) with Lucene's non-negative idf
--             ln(1 + (N - df + 0.5) / (df + 0.5)); N, df and the average chunk length are
--             per base (bm25_totals, bm25_terms), so each base keeps its own statistics.
--             Exact top leg_limit over posting blocks, with MaxScore and block-max pruning
--             (sql/search/bm25_top_k.v5.sql).
--   complete scores: every candidate either leg kept gets the other leg's exact score too (cosine
--             by chunk id; BM25 by bm25_chunk_scores, 0 when it holds no term); ranks stay the
--             legs' own (NULL when the leg did not keep the chunk).
--   rrf     = wd / (rrf_k + dense_rank) + wk / (rrf_k + keyword_rank), a missing rank adding 0
--             (Cormack, Clarke & Buettcher, SIGIR 2009, a weight per list).
--   convex  = alpha * N(dense) + (1 - alpha) * N(keyword) (Bruch, Gai & Ingber, ACM TOIS 2023):
--             minmax N(s) = (s - min) / (max - min) over the candidates; tmm N(s) = (s - inf) /
--             (max - inf) with the theoretical inf (cosine -1, BM25 0); a missing score is 0;
--             z N(s) = (s - mean) / sd, mean and population sd of the scores of the candidates
--             that leg ranked (sd 0 or none: 1, none: mean 0), a missing score -3 (Montague &
--             Aslam, CIKM 2001).
--
-- Returns, best first: chunk_id, dense, dense_rank, keyword, keyword_rank, fused, the
-- citation columns (col: the chunk's column when it starts inside a line an earlier chunk holds),
-- holds (NULL unless the chunk is a fact of a memory base, SPEC F11: true while no newer fact
-- replaced it), term_dfs and base_chunks (the row's base: how many of its chunks hold each of
-- mark_terms, a jsonb object without the terms none holds, and its chunk count N; NULL without
-- mark_terms or BM25 totals), the routing figures (share: the dense share used;
-- absent_share; bm25_ratio: best BM25 / its bound, the sum of idf * (k1 + 1) * weight), and four
-- timestamps (started_at, dense_done_at, keyword_done_at, finished_at) from which the caller
-- derives the time each step took: each leg is MATERIALIZED, so they run one after the other and
-- each stamps the moment it ended.
WITH allowed_documents AS MATERIALIZED (
    SELECT d.document_id
    FROM documents AS d
    JOIN sources AS s ON s.source_id = d.source_id
    WHERE d.base_id = ANY(%(base_ids)s::int[])
      AND (%(path_prefix)s::text IS NULL OR starts_with(d.path, %(path_prefix)s::text))
      AND (%(kinds)s::text[] IS NULL OR d.kind = ANY(%(kinds)s::text[]))
      AND (%(sources)s::text[] IS NULL OR s.name = ANY(%(sources)s::text[]))
      AND (%(exclude_prefixes)s::text[] IS NULL
           OR NOT EXISTS (SELECT 1 FROM unnest(%(exclude_prefixes)s::text[]) AS x(prefix) WHERE starts_with(d.path, x.prefix)))
      -- Metadata (issue 21): tags (GIN ix_documents_tags), author, category, dates, the other keys.
      AND (%(tags_any)s::text[] IS NULL OR d.tags && %(tags_any)s::text[])
      AND (%(tags_all)s::text[] IS NULL OR d.tags @> %(tags_all)s::text[])
      AND (%(exclude_tags)s::text[] IS NULL OR NOT d.tags && %(exclude_tags)s::text[])
      AND (%(authors)s::text[] IS NULL OR d.author = ANY(%(authors)s::text[])
           OR d.meta->'authors' ?| %(authors)s::text[])  -- every author of a list (meta.authors)
      AND (%(categories)s::text[] IS NULL OR d.category = ANY(%(categories)s::text[]))
      AND (%(since)s::timestamptz IS NULL OR coalesce(d.date, d.modified_at) >= %(since)s::timestamptz)
      AND (%(until)s::timestamptz IS NULL OR coalesce(d.date, d.modified_at) < %(until)s::timestamptz)
      -- meta: an array of requirements, each an array of alternatives; every requirement holds
      -- when the document's meta contains one of its alternatives.
      AND (%(meta)s::jsonb IS NULL
           OR NOT EXISTS (SELECT 1 FROM jsonb_array_elements(%(meta)s::jsonb) AS r(options)
                          WHERE NOT EXISTS (SELECT 1 FROM jsonb_array_elements(r.options) AS o(value)
                                            WHERE d.meta @> o.value)))
),
-- The chunks holding an excluded word (-legacy): its postings, in every base searched.
excluded AS MATERIALIZED (
    SELECT DISTINCT pb.block_no::bigint * 256 + p.o AS chunk_id
    FROM bm25_terms AS bt
    JOIN posting_blocks AS pb ON pb.base_id = bt.base_id AND pb.term_id = bt.term_id
    CROSS JOIN LATERAL unnest(coalesce(pb.offsets, ARRAY[pb.first_offset])) AS p(o)
    WHERE %(exclude_terms)s::text[] IS NOT NULL
      AND bt.base_id = ANY(%(base_ids)s::int[]) AND pb.base_id = ANY(%(base_ids)s::int[])
      AND bt.term = ANY(%(exclude_terms)s::text[])
),
-- The chunks the principals may not read (issue 21): never ranked by the keyword leg, whose posting
-- blocks are not under row-level security (the dense leg's vectors are).
hidden AS MATERIALIZED (
    SELECT h.chunk_id FROM metis_hidden_chunks(%(base_ids)s::int[]) AS h(chunk_id)
    WHERE %(restricted)s::boolean
),
-- A broad filter: the documents of the bases searched that the filters drop, when they
-- are fewer than those kept. The keyword leg then ranks every chunk but theirs (p_drop_chunks)
-- rather than the kept documents' (p_documents): the same chunks, and the top is as exact; but
-- bm25_top_k turns p_documents into its allowed chunks and blocks, which for a filter keeping
-- (nearly) every document cost more than the leg itself (100k chunks: 445 against 117 ms fused).
dropped_documents AS MATERIALIZED (
    SELECT d.document_id
    FROM documents AS d
    WHERE NOT %(unfiltered)s::boolean
      AND d.base_id = ANY(%(base_ids)s::int[])
      AND d.document_id NOT IN (SELECT document_id FROM allowed_documents)
),
-- The keyword leg's filter arguments: p_documents (NULL = every document) and p_drop_chunks (the
-- chunks holding an excluded word, those the principals may not read, and with a broad filter the
-- chunks of the documents it drops; NULL = none).
keyword_filter AS MATERIALIZED (
    SELECT CASE WHEN %(unfiltered)s::boolean OR choice.by_dropping THEN NULL
                ELSE (SELECT coalesce(array_agg(document_id), '{}'::bigint[]) FROM allowed_documents) END
             AS documents,
           CASE WHEN %(exclude_terms)s::text[] IS NULL AND NOT %(restricted)s::boolean AND NOT choice.by_dropping
                THEN NULL
                ELSE (SELECT array_agg(dropped.chunk_id) FROM (
                          SELECT chunk_id FROM excluded
                          UNION ALL SELECT chunk_id FROM hidden
                          UNION ALL SELECT c.chunk_id FROM chunks AS c
                                    WHERE choice.by_dropping AND c.base_id = ANY(%(base_ids)s::int[])
                                      AND c.document_id IN (SELECT document_id FROM dropped_documents)
                      ) AS dropped) END
             AS drop_chunks
    FROM (SELECT NOT %(unfiltered)s::boolean
                 AND (SELECT count(*) FROM dropped_documents) < (SELECT count(*) FROM allowed_documents)
                 AS by_dropping) AS choice
),
dense_read AS MATERIALIZED (
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
              -- One base (the search pipeline's statement per base): an equality, which the planner
              -- folds the CASE to; compared on every row, = ANY of a one-element array costs about
              -- twice as much (docs/performance.md).
              AND CASE WHEN cardinality(%(base_ids)s::int[]) = 1 THEN e.base_id = (%(base_ids)s::int[])[1]
                       ELSE e.base_id = ANY(%(base_ids)s::int[]) END
              -- The model's name is compared row by row only when the bases hold vectors of another
              -- model too (a switch of model under way): two probes of ix_embeddings_base_model, run
              -- once (an InitPlan) before the scan; comparing the text of every row costs about a
              -- tenth of it.
              AND ((SELECT NOT EXISTS (SELECT 1 FROM embeddings AS o
                                       WHERE o.base_id = ANY(%(base_ids)s::int[]) AND o.model < %(model)s::text)
                       AND NOT EXISTS (SELECT 1 FROM embeddings AS o
                                       WHERE o.base_id = ANY(%(base_ids)s::int[]) AND o.model > %(model)s::text))
                   OR e.model = %(model)s::text)
              AND (%(only_chunks)s::bigint[] IS NULL OR e.chunk_id = ANY(%(only_chunks)s::bigint[]))
              AND (%(exclude_terms)s::text[] IS NULL OR e.chunk_id NOT IN (SELECT chunk_id FROM excluded))
            UNION ALL
            -- With a filter: the allowed documents' vectors only. A separate branch, so that the
            -- IN becomes a semi-join the planner may run on ix_embeddings_document.
            SELECT e.chunk_id, e.embedding <=> %(query_embedding)s::halfvec AS distance
            FROM embeddings AS e
            WHERE %(query_embedding)s::halfvec IS NOT NULL AND NOT %(unfiltered)s::boolean
              AND e.base_id = ANY(%(base_ids)s::int[])
              AND e.model = %(model)s::text
              AND e.document_id IN (SELECT document_id FROM allowed_documents)
              AND (%(only_chunks)s::bigint[] IS NULL OR e.chunk_id = ANY(%(only_chunks)s::bigint[]))
              AND (%(exclude_terms)s::text[] IS NULL OR e.chunk_id NOT IN (SELECT chunk_id FROM excluded))
        ) AS scanned
        ORDER BY scanned.distance, scanned.chunk_id
        LIMIT %(leg_read)s
    ) AS nearest
),
-- Copies of one text (issue 20): with collapse_copies, the chunks of one text (chunks.text) take one
-- place in the leg, the place of the best-ranked of them. The copy kept is one that still holds (a
-- fact of a memory base that no newer fact replaced, or any chunk that is not a fact: SPEC F11),
-- then the best-ranked: a fact that changes back (Tuesday, Thursday, Tuesday) repeats a replaced
-- fact word for word, and the copy that holds answers in the replaced one's place. The dense leg
-- read leg_read = COPIES_READ * leg_limit rows, so it keeps leg_limit distinct texts (fewer only
-- when more of those rows are copies); the keyword leg keeps the distinct texts of its top
-- leg_limit. Off, leg_read = leg_limit and no text is looked up. Scores are the kept copy's own;
-- ranks count the kept chunks, in the order of their places.
-- The dense leg gives a text to its best leg_limit rows first (dense_head), and to the rows past
-- them only when the head holds two copies of one text or a replaced fact: otherwise no row past it
-- can take a place in the leg, and the head is the leg as it is.
dense_head AS MATERIALIZED (
    SELECT r.chunk_id, r.score, r.rank, copy.text, copy.replaced
    FROM dense_read AS r
    LEFT JOIN LATERAL (
        SELECT c.text, fa.superseded_by IS NOT NULL AS replaced
        FROM chunks AS c
        LEFT JOIN facts AS fa ON fa.base_id = ANY(%(base_ids)s::int[]) AND fa.base_id = c.base_id
                             AND fa.document_id = c.document_id
        WHERE %(collapse_copies)s::boolean
          AND c.base_id = ANY(%(base_ids)s::int[]) AND c.chunk_id = r.chunk_id
    ) AS copy ON true
    WHERE r.rank <= %(leg_limit)s
),
dense AS MATERIALIZED (
    SELECT kept.chunk_id, kept.score, row_number() OVER (ORDER BY kept.place, kept.rank) AS rank,
           clock_timestamp() AS done_at
    FROM (
        SELECT t.chunk_id, t.score, t.rank,
               min(t.rank) OVER copies AS place,
               row_number() OVER (copies ORDER BY t.replaced, t.rank) AS copy_no
        FROM (
            SELECT h.chunk_id, h.score, h.rank, h.text, h.replaced FROM dense_head AS h
            UNION ALL
            SELECT r.chunk_id, r.score, r.rank, copy.text, copy.replaced
            FROM dense_read AS r
            LEFT JOIN LATERAL (
                SELECT c.text, fa.superseded_by IS NOT NULL AS replaced
                FROM chunks AS c
                LEFT JOIN facts AS fa ON fa.base_id = ANY(%(base_ids)s::int[]) AND fa.base_id = c.base_id
                                     AND fa.document_id = c.document_id
                WHERE c.base_id = ANY(%(base_ids)s::int[]) AND c.chunk_id = r.chunk_id
            ) AS copy ON true
            WHERE r.rank > %(leg_limit)s
              AND (SELECT count(DISTINCT h.text) < count(h.text) OR coalesce(bool_or(h.replaced), false)
                   FROM dense_head AS h)
        ) AS t
        WINDOW copies AS (PARTITION BY t.text, CASE WHEN t.text IS NULL THEN t.chunk_id END)
    ) AS kept
    WHERE kept.copy_no = 1
    ORDER BY kept.place, kept.rank
    LIMIT %(leg_limit)s
),
-- The keyword leg: exact top leg_limit BM25 over the posting blocks, in the function bm25_top_k
-- (sql/search/bm25_top_k.v5.sql: MaxScore and block-max pruning, planned once per session).
keyword_read AS MATERIALIZED (
    SELECT k.chunk_id,
           k.score,
           row_number() OVER (ORDER BY k.score DESC, k.chunk_id) AS rank,
           clock_timestamp() AS done_at
    FROM bm25_top_k(
        %(base_ids)s::int[], %(terms)s::text[], %(term_weights)s::float8[], %(k1)s::float8, %(b)s::float8,
        %(leg_limit)s::int,
        (SELECT documents FROM keyword_filter), %(only_chunks)s::bigint[], (SELECT drop_chunks FROM keyword_filter)
    ) AS k
),
keyword AS MATERIALIZED (
    SELECT kept.chunk_id, kept.score, row_number() OVER (ORDER BY kept.place, kept.rank) AS rank,
           clock_timestamp() AS done_at
    FROM (
        SELECT r.chunk_id, r.score, r.rank,
               min(r.rank) OVER copies AS place,
               row_number() OVER (copies ORDER BY copy.replaced, r.rank) AS copy_no
        FROM keyword_read AS r
        LEFT JOIN LATERAL (
            SELECT c.text, fa.superseded_by IS NOT NULL AS replaced
            FROM chunks AS c
            LEFT JOIN facts AS fa ON fa.base_id = ANY(%(base_ids)s::int[]) AND fa.base_id = c.base_id
                                 AND fa.document_id = c.document_id
            WHERE %(collapse_copies)s::boolean
              AND c.base_id = ANY(%(base_ids)s::int[]) AND c.chunk_id = r.chunk_id
        ) AS copy ON true
        WINDOW copies AS (PARTITION BY copy.text, CASE WHEN copy.text IS NULL THEN r.chunk_id END)
    ) AS kept
    WHERE kept.copy_no = 1
    ORDER BY kept.place, kept.rank
    LIMIT %(leg_limit)s
),
-- Complete scores: the cosine of the keyword leg's chunks the dense leg did not keep (by chunk id,
-- the primary key of embeddings) and the BM25 of the dense leg's chunks the keyword leg did not keep.
dense_missing AS MATERIALIZED (
    SELECT k.chunk_id, 1 - (e.embedding <=> %(query_embedding)s::halfvec) AS score
    FROM keyword AS k
    -- A LATERAL with LIMIT (never pulled up into a join): one primary-key lookup per chunk, never
    -- a scan of the base's vectors.
    CROSS JOIN LATERAL (
        SELECT e.embedding FROM embeddings AS e
        WHERE e.chunk_id = k.chunk_id AND e.model = %(model)s::text AND e.base_id = ANY(%(base_ids)s::int[])
        LIMIT 1
    ) AS e
    WHERE %(query_embedding)s::halfvec IS NOT NULL
      AND k.chunk_id NOT IN (SELECT chunk_id FROM dense)
),
keyword_missing AS MATERIALIZED (
    SELECT m.chunk_id, m.score
    FROM bm25_chunk_scores(
        %(base_ids)s::int[], %(terms)s::text[], %(term_weights)s::float8[], %(k1)s::float8, %(b)s::float8,
        (SELECT array_agg(d.chunk_id) FROM dense AS d WHERE d.chunk_id NOT IN (SELECT chunk_id FROM keyword))
    ) AS m
    WHERE cardinality(%(terms)s::text[]) > 0
),
candidates AS MATERIALIZED (
    SELECT coalesce(d.chunk_id, k.chunk_id) AS chunk_id,
           coalesce(d.score, dm.score) AS dense,
           d.rank AS dense_rank,
           coalesce(k.score, km.score) AS keyword,
           k.rank AS keyword_rank
    FROM dense AS d
    FULL OUTER JOIN keyword AS k ON k.chunk_id = d.chunk_id
    LEFT JOIN dense_missing AS dm ON dm.chunk_id = k.chunk_id
    LEFT JOIN keyword_missing AS km ON km.chunk_id = d.chunk_id
),
-- Routing's figures of this question (metis_pg.routing): the share of its words no chunk holds,
-- and its best BM25 against what BM25 can give it at most (the sum of idf * (k1 + 1) * weight over
-- its terms, in the base where that is largest).
question AS MATERIALIZED (
    SELECT coalesce((SELECT count(*) FILTER (WHERE NOT EXISTS (
                         SELECT 1 FROM bm25_terms AS bt
                         WHERE bt.base_id = ANY(%(base_ids)s::int[]) AND bt.term = a.term AND bt.df > 0))::float8
                     / nullif(count(*), 0)
                     FROM unnest(%(asked_terms)s::text[]) AS a(term)), 0) AS absent_share,
           coalesce((SELECT max(keyword) FROM candidates)
                    / nullif((SELECT max(per_base.bound) FROM (
                        SELECT sum(ln(1 + (tot.chunk_count::float8 - bt.df + 0.5) / (bt.df + 0.5))
                                   * (%(k1)s::float8 + 1) * coalesce(qt.weight, 1)) AS bound
                        FROM bm25_terms AS bt
                        JOIN bm25_totals AS tot ON tot.base_id = bt.base_id
                        LEFT JOIN unnest(%(terms)s::text[], %(term_weights)s::float8[]) AS qt(term, weight)
                          ON qt.term = bt.term
                        WHERE bt.base_id = ANY(%(base_ids)s::int[]) AND tot.base_id = ANY(%(base_ids)s::int[])
                          AND bt.term = ANY(%(terms)s::text[])
                        GROUP BY bt.base_id) AS per_base), 0), 1) AS bm25_ratio
),
route AS MATERIALIZED (
    SELECT q.absent_share, q.bm25_ratio,
           least(1, greatest(0, %(dense_share)s::float8
                                + %(route_absent)s::float8 * q.absent_share
                                + CASE WHEN q.bm25_ratio < %(weak_ratio)s::float8
                                       THEN %(route_weak)s::float8 ELSE 0 END)) AS share
    FROM question AS q
),
spread AS MATERIALIZED (
    SELECT min(dense) AS dense_min, max(dense) AS dense_max, min(keyword) AS keyword_min, max(keyword) AS keyword_max,
           -- z: each leg's own list (the candidates it ranked); none: mean 0, sd 1
           coalesce(avg(dense) FILTER (WHERE dense_rank IS NOT NULL), 0) AS dense_mean,
           coalesce(nullif(stddev_pop(dense) FILTER (WHERE dense_rank IS NOT NULL), 0), 1) AS dense_sd,
           coalesce(avg(keyword) FILTER (WHERE keyword_rank IS NOT NULL), 0) AS keyword_mean,
           coalesce(nullif(stddev_pop(keyword) FILTER (WHERE keyword_rank IS NOT NULL), 0), 1) AS keyword_sd
    FROM candidates
),
fused AS (
    SELECT c.*, r.share, r.absent_share, r.bm25_ratio,
           CASE WHEN %(fusion)s::text = 'rrf' THEN
               coalesce(%(weight_sum)s::float8 * r.share / (%(rrf_k)s::int + c.dense_rank), 0)
                 + coalesce(%(weight_sum)s::float8 * (1 - r.share) / (%(rrf_k)s::int + c.keyword_rank), 0)
           WHEN %(normalization)s::text = 'minmax' THEN
               r.share * coalesce(CASE WHEN s.dense_max > s.dense_min
                                       THEN (c.dense - s.dense_min) / (s.dense_max - s.dense_min) ELSE 1 END
                                  * (c.dense IS NOT NULL)::int, 0)
                 + (1 - r.share) * coalesce(CASE WHEN s.keyword_max > s.keyword_min
                                                 THEN (c.keyword - s.keyword_min) / (s.keyword_max - s.keyword_min)
                                                 ELSE (c.keyword > 0)::int END, 0)
           WHEN %(normalization)s::text = 'z' THEN  -- a missing score is 3 deviations below the mean
               r.share * coalesce((c.dense - s.dense_mean) / s.dense_sd, -3)
                 + (1 - r.share) * coalesce((c.keyword - s.keyword_mean) / s.keyword_sd, -3)
           ELSE  -- tmm: from the theoretical minimum (cosine -1, BM25 0) to the candidates' best
               r.share * coalesce((c.dense + 1) / nullif(s.dense_max + 1, 0), 0)
                 + (1 - r.share) * coalesce(c.keyword / nullif(s.keyword_max, 0), 0)
           END AS fused
    FROM candidates AS c
    CROSS JOIN route AS r
    CROSS JOIN spread AS s
    ORDER BY fused DESC, chunk_id
    LIMIT %(top_k)s
),
-- The BM25 statistics of the question's terms in each base searched: what decides which words a
-- snippet marks (metis_pg.snippets.weighing_terms), read here rather than by a statement of its own.
marking AS MATERIALIZED (
    SELECT tot.base_id, tot.chunk_count,
           coalesce(jsonb_object_agg(bt.term, bt.df) FILTER (WHERE bt.term IS NOT NULL), '{}'::jsonb) AS dfs
    FROM bm25_totals AS tot
    LEFT JOIN bm25_terms AS bt ON bt.base_id = ANY(%(base_ids)s::int[]) AND bt.base_id = tot.base_id
                              AND bt.term = ANY(%(mark_terms)s::text[])
    WHERE tot.base_id = ANY(%(base_ids)s::int[]) AND cardinality(%(mark_terms)s::text[]) > 0
    GROUP BY tot.base_id, tot.chunk_count
)
-- The final fetch joins three relations (the fused rows, their chunks and their documents); the
-- rest are scalar sub-selects of one row each (a document's source and base, its fact, its base's
-- marking) or InitPlans (the legs' stamps). PostgreSQL plans a join by trying the orders of its
-- relations: the join of eight it replaces (with sources, bases, facts, marking and the stamps)
-- took about 2 ms more planning at every search, in every mode, for the same rows
-- (docs/performance.md).
SELECT f.chunk_id, f.dense, f.dense_rank, f.keyword, f.keyword_rank, f.fused,
       f.share, f.absent_share, f.bm25_ratio,
       c.text, c.title, c.headings, c.page, c.line, c.char_start, c.char_end, c.line_end, c.line_map,
       c.page_label, c.col,
       doc.document_id, doc.path AS document, doc.kind,
       (SELECT src.name FROM sources AS src WHERE src.source_id = doc.source_id) AS source,
       (SELECT b.name FROM bases AS b WHERE b.base_id = doc.base_id) AS base,
       doc.tags, doc.author, coalesce(doc.date, doc.modified_at) AS document_date,
       (SELECT fa.superseded_by IS NULL FROM facts AS fa
        WHERE fa.base_id = ANY(%(base_ids)s::int[]) AND fa.base_id = doc.base_id
          AND fa.document_id = doc.document_id) AS holds,
       (SELECT m.dfs FROM marking AS m WHERE m.base_id = doc.base_id) AS term_dfs,
       (SELECT m.chunk_count FROM marking AS m WHERE m.base_id = doc.base_id) AS base_chunks,
       statement_timestamp() AS started_at,
       (SELECT max(done_at) FROM dense) AS dense_done_at,
       (SELECT max(done_at) FROM keyword) AS keyword_done_at,
       clock_timestamp() AS finished_at
-- Every join and sub-select carries base_id (the distribution column under Citus, docs/scaling.md),
-- and every distributed table is filtered by the bases searched itself (Citus prunes shards by a
-- table's own filter, not by one it is joined to): with one base searched, each table is read on one
-- shard and the statement is a router query (sources and bases are reference tables).
FROM fused AS f
JOIN chunks AS c ON c.base_id = ANY(%(base_ids)s::int[]) AND c.chunk_id = f.chunk_id
JOIN documents AS doc ON doc.base_id = ANY(%(base_ids)s::int[]) AND doc.base_id = c.base_id
                     AND doc.document_id = c.document_id
ORDER BY f.fused DESC, f.chunk_id
