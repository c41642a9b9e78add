-- How many chunks of each base searched hold each of the question's terms (df), with the base's
-- chunk count (N): what decides which of the question's words a snippet marks
-- (metis_pg.snippets.weighing_terms: the idf of BM25's keyword leg, from the same statistics).
-- Parameters:
--   %(base_ids)s  int[]   bases searched
--   %(terms)s     text[]  the question's distinct terms (metis_pg.tokenizer.query_terms)
-- Returns: base_id, term, df, chunk_count; a term no chunk of a base holds has no row.
SELECT bt.base_id, bt.term, bt.df, tot.chunk_count
FROM bm25_terms AS bt
JOIN bm25_totals AS tot ON tot.base_id = bt.base_id
WHERE bt.base_id = ANY(%(base_ids)s)
  AND bt.term = ANY(%(terms)s)
