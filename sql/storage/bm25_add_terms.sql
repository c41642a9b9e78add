-- Add a batch of documents' terms to its base's BM25 statistics (SPEC F6).
-- Run with their postings, in the same transaction.
-- Parameters: %(base_id)s int; %(terms)b text[] (sorted: rows are locked in one order) and
-- %(dfs)b int[] (for each term, how many of the new chunks hold it), sent in binary: a
-- batch carries tens of thousands of terms.
INSERT INTO bm25_terms AS t (base_id, term, df)
SELECT %(base_id)s::int, added.term, added.df
FROM unnest(%(terms)b::text[], %(dfs)b::int[]) WITH ORDINALITY AS added(term, df, position)
ORDER BY added.position
ON CONFLICT (base_id, term) DO UPDATE SET df = t.df + EXCLUDED.df
