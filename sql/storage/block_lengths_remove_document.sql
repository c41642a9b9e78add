-- Zero the lengths of one document's chunks in their blocks; a block left with no chunk loses its row.
-- Run after storage/bm25_remove_document.sql and before the chunks are deleted, in the same transaction.
-- Parameters: %(base_id)s int, %(document_id)s bigint.
WITH gone AS MATERIALIZED (
    SELECT (c.chunk_id / 256)::int AS block_no, array_agg(mod(c.chunk_id, 256)::int) AS offsets
    FROM chunks AS c
    WHERE c.document_id = %(document_id)s::bigint
    GROUP BY c.chunk_id / 256
),
zeroed AS MATERIALIZED (
    SELECT bl.block_no,
           array(SELECT CASE WHEN u.o - 1 = ANY(g.offsets) THEN 0 ELSE u.length END
                 FROM unnest(bl.lengths) WITH ORDINALITY AS u(length, o) ORDER BY u.o) AS lengths
    FROM gone AS g
    JOIN block_lengths AS bl ON bl.base_id = %(base_id)s::int AND bl.block_no = g.block_no
),
emptied AS (
    DELETE FROM block_lengths AS bl
    USING zeroed AS z
    WHERE bl.base_id = %(base_id)s::int AND bl.block_no = z.block_no AND 0 = ALL(z.lengths)
)
UPDATE block_lengths AS bl
SET lengths = z.lengths
FROM zeroed AS z
WHERE bl.base_id = %(base_id)s::int AND bl.block_no = z.block_no AND NOT 0 = ALL(z.lengths)
