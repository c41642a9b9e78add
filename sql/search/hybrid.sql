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
--                       (BaseSpec's defaults: metis_pg/config.py; a search may override them)
--   %(leg_limit)s       int      rows kept by each leg: max(50, 4 * top_k)
--   %(top_k)s           int      fused rows returned
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
      AND (%(exclude_prefixes)s::text[] IS NULL
           OR NOT EXISTS (SELECT 1 FROM unnest(%(exclude_prefixes)s::text[]) AS x(prefix) WHERE starts_with(d.path, x.prefix)))
      -- Metadata (issue 21): tags (GIN ix_documents_tags), author, category, dates, the other keys.
      AND (%(tags_any)s::text[] IS NULL OR d.tags && %(tags_any)s::text[])
      AND (%(tags_all)s::text[] IS NULL OR d.tags @> %(tags_all)s::text[])
      AND (%(exclude_tags)s::text[] IS NULL OR NOT d.tags && %(exclude_tags)s::text[])
      AND (%(authors)s::text[] IS NULL OR d.author = ANY(%(authors)s::text[]))
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
-- The keyword leg: exact top leg_limit BM25 over the posting blocks, in the function bm25_top_k
-- (sql/search/bm25_top_k.v2.sql: MaxScore and block-max pruning, planned once per session).
keyword AS MATERIALIZED (
    SELECT k.chunk_id,
           k.score,
           row_number() OVER (ORDER BY k.score DESC, k.chunk_id) AS rank,
           clock_timestamp() AS done_at
    FROM bm25_top_k(
        %(base_ids)s::int[], %(terms)s::text[], %(term_weights)s::float8[], %(k1)s::float8, %(b)s::float8,
        %(leg_limit)s::int,
        CASE WHEN %(unfiltered)s::boolean THEN NULL
             ELSE coalesce((SELECT array_agg(document_id) FROM allowed_documents), '{}'::bigint[]) END
    ) AS k
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
       doc.tags, doc.author, coalesce(doc.date, doc.modified_at) AS document_date,
       CASE WHEN fa.document_id IS NULL THEN NULL ELSE fa.superseded_by IS NULL END AS holds,
       statement_timestamp() AS started_at, legs_done.dense_done_at, legs_done.keyword_done_at,
       clock_timestamp() AS finished_at
-- Every join carries base_id (the distribution column under Citus, docs/scaling.md), and every
-- distributed table is filtered by the bases searched itself (Citus prunes shards by a table's own
-- filter, not by one it is joined to): with one base searched, each table is read on one shard and
-- the statement is a router query.
FROM fused AS f
JOIN chunks AS c ON c.base_id = ANY(%(base_ids)s::int[]) AND c.chunk_id = f.chunk_id
JOIN documents AS doc ON doc.base_id = ANY(%(base_ids)s::int[]) AND doc.base_id = c.base_id
                     AND doc.document_id = c.document_id
JOIN sources AS src ON src.source_id = doc.source_id
JOIN bases AS b ON b.base_id = doc.base_id
LEFT JOIN facts AS fa ON fa.base_id = ANY(%(base_ids)s::int[]) AND fa.base_id = doc.base_id
                     AND fa.document_id = doc.document_id
CROSS JOIN legs_done
ORDER BY f.fused DESC, f.chunk_id
