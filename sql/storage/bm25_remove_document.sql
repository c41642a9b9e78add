-- Remove one document's postings from its base's BM25 statistics (SPEC F3, F6).
-- Run before its postings are deleted, in the same transaction; terms whose
-- document frequency drops to 0 are deleted.
-- Parameters: %(base_id)s int, %(document_id)s bigint.
WITH gone AS (
    SELECT p.term, count(*) AS n
    FROM postings AS p
    WHERE p.document_id = %(document_id)s
    GROUP BY p.term
),
lowered AS (
    UPDATE bm25_terms AS t
    SET df = t.df - gone.n
    FROM gone
    WHERE t.base_id = %(base_id)s AND t.term = gone.term
    RETURNING t.term, t.df
)
DELETE FROM bm25_terms AS t
USING lowered
WHERE t.base_id = %(base_id)s AND t.term = lowered.term AND lowered.df <= 0
