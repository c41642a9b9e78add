-- Add one document's postings to its base's BM25 statistics (SPEC F6).
-- Run after its postings are written, in the same transaction.
-- Parameters: %(base_id)s int, %(document_id)s bigint. Terms are locked in term order.
INSERT INTO bm25_terms AS t (base_id, term, df)
SELECT %(base_id)s, p.term, count(*)
FROM postings AS p
WHERE p.document_id = %(document_id)s
GROUP BY p.term
ORDER BY p.term
ON CONFLICT (base_id, term) DO UPDATE SET df = t.df + EXCLUDED.df
