-- Add (or, with negative numbers, remove) chunks and terms to a base's BM25 totals.
-- Parameters: %(base_id)s int, %(chunks)s bigint, %(terms)s bigint.
INSERT INTO bm25_totals AS t (base_id, chunk_count, term_total)
VALUES (%(base_id)s, %(chunks)s, %(terms)s)
ON CONFLICT (base_id) DO UPDATE
SET chunk_count = t.chunk_count + EXCLUDED.chunk_count,
    term_total = t.term_total + EXCLUDED.term_total
