-- The chunks that may hold a quoted phrase of the question (issue 20), with their text: those
-- holding each of its selective terms (in at most a tenth of their base's chunks, and always the
-- rarest one), from the posting blocks. metis_pg.retrieval.phrase_chunks then keeps those whose folded text (title, headings and text)
-- holds the phrase itself (its words in order, on word boundaries), and the search statement ranks
-- only those (hybrid.sql: only_chunks).
--
-- Parameters:
--   %(base_ids)s  int[]   bases searched
--   %(terms)s     text[]  the phrase's distinct BM25 terms
--   %(limit)s     int     how many chunks at most are returned (a phrase of common words only could
--                         name most of a base: the caller says so instead)
-- Returns: chunk_id, title, headings, text (the phrase may be in the title or a heading: BM25 reads
-- them with the text, chunking.embedding_text).
WITH phrase_terms AS MATERIALIZED (
    SELECT bt.base_id, bt.term_id, bt.df,
           row_number() OVER (PARTITION BY bt.base_id ORDER BY bt.df, bt.term) AS rarity,
           tot.chunk_count
    FROM bm25_terms AS bt
    JOIN bm25_totals AS tot ON tot.base_id = bt.base_id
    WHERE bt.base_id = ANY(%(base_ids)s::int[]) AND tot.base_id = ANY(%(base_ids)s::int[])
      AND bt.term = ANY(%(terms)s::text[]) AND bt.df > 0
),
-- Bases holding every term of the phrase (else no chunk of theirs can hold it).
complete AS MATERIALIZED (
    SELECT base_id FROM phrase_terms GROUP BY base_id
    HAVING count(*) = cardinality(%(terms)s::text[])
),
selective AS MATERIALIZED (
    SELECT * FROM phrase_terms
    WHERE base_id IN (SELECT base_id FROM complete) AND (rarity = 1 OR df::bigint * 10 <= chunk_count)
),
holding AS MATERIALIZED (
    SELECT pb.block_no::bigint * 256 + p.o AS chunk_id
    FROM selective AS q
    JOIN posting_blocks AS pb ON pb.base_id = q.base_id AND pb.term_id = q.term_id
    CROSS JOIN LATERAL unnest(coalesce(pb.offsets, ARRAY[pb.first_offset])) AS p(o)
    -- Every distributed table filtered by the bases itself: one base's statement is then a Citus
    -- router query (docs/scaling.md), sent whole to its worker.
    WHERE pb.base_id = ANY(%(base_ids)s::int[])
    GROUP BY pb.base_id, 1
    HAVING count(*) = (SELECT count(*) FROM selective AS s WHERE s.base_id = pb.base_id)
    LIMIT %(limit)s
)
SELECT c.chunk_id, c.title, c.headings, c.text
FROM holding AS h
JOIN chunks AS c ON c.chunk_id = h.chunk_id AND c.base_id = ANY(%(base_ids)s::int[])
