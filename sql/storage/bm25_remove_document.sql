-- Remove one document's postings from its base's BM25 statistics (SPEC F3, F6).
-- Run before its postings are deleted, in the same transaction; terms whose
-- document frequency drops to 0 are deleted.
-- Parameters: %(base_id)s int, %(document_id)s bigint.
--
-- The DELETE (terms left with no posting) and the UPDATE (the others) touch
-- disjoint rows: one statement cannot modify a row twice (an UPDATE in a CTE
-- followed by a DELETE of the same rows silently keeps them at df = 0).
WITH gone AS (
    SELECT p.term, count(*) AS n
    FROM postings AS p
    WHERE p.document_id = %(document_id)s
    GROUP BY p.term
),
emptied AS (
    DELETE FROM bm25_terms AS t
    USING gone
    WHERE t.base_id = %(base_id)s AND t.term = gone.term AND t.df - gone.n <= 0
)
UPDATE bm25_terms AS t
SET df = t.df - gone.n
FROM gone
WHERE t.base_id = %(base_id)s AND t.term = gone.term AND t.df - gone.n > 0
