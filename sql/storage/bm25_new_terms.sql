-- Add a batch of documents' terms to its base's BM25 statistics, step 2 of 2 (after
-- storage/bm25_add_terms.sql, in the same transaction): the terms the base did not have.
-- Parameters: as bm25_add_terms.sql, holding only the terms it did not return.
-- Returns: term, term_id — one row per term given.
INSERT INTO bm25_terms (base_id, term, df, max_tf, min_length)
SELECT %(base_id)s::int, a.term, a.df, a.max_tf, a.min_length
FROM unnest(string_to_array(%(terms)s::text, E'\n'), %(dfs)s::int[], %(max_tfs)s::int[],
            %(min_lengths)s::int[]) AS a(term, df, max_tf, min_length)
RETURNING term, term_id
