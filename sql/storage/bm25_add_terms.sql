-- Add a batch of documents' terms to its base's BM25 statistics (SPEC F6), step 1 of 2: the terms
-- the base has already; returns their ids. Step 2 (storage/bm25_new_terms.sql) inserts the others.
-- Two statements, not one with a CTE per step: Citus plans neither a correlated subquery nor an
-- INSERT ... SELECT beside a data-modifying CTE (docs/scaling.md).
-- Run with the postings, in the same transaction, under the base's lock (storage.lock_base): the
-- UPDATE and the INSERT then see the same terms, and no other writer adds one meanwhile.
-- Parameters: %(base_id)s int; %(terms)s text, the terms separated by newlines (a term holds no
-- whitespace); %(dfs)s, %(max_tfs)s, %(min_lengths)s int[] literals ('{1,2}'), parallel to the terms:
-- how many of the new chunks hold it, its most occurrences in one of them, the fewest terms of one
-- holding it. Text, formatted by the caller in one join: a batch carries tens of thousands of terms.
-- Returns: i, term_id — one row per term the base had, i its position in %(terms)s (from 1): the
-- caller places the ids by position, without sending the terms back.
-- Only terms the base lacks are inserted: an INSERT ... ON CONFLICT would draw an identity value
-- for every term of every batch and run out of integers after ~10^5 batches.
UPDATE bm25_terms AS t
SET df = t.df + a.df, max_tf = greatest(t.max_tf, a.max_tf), min_length = least(t.min_length, a.min_length)
FROM unnest(string_to_array(%(terms)s::text, E'\n'), %(dfs)s::int[], %(max_tfs)s::int[],
            %(min_lengths)s::int[]) WITH ORDINALITY AS a(term, df, max_tf, min_length, i)
WHERE t.base_id = %(base_id)s::int AND t.term = a.term
RETURNING a.i, t.term_id
