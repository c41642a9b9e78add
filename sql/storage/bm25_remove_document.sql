-- Remove one document's postings from its base's posting blocks, block lengths and BM25 statistics
-- (SPEC F3, F6). Run before its chunks are deleted (they say which block offsets go), in the same
-- transaction. Parameters: %(base_id)s int, %(document_id)s bigint.
--
-- Every row of the document's blocks that holds one of its chunks is rewritten without them (or
-- deleted when nothing remains), with its max_tf and min_length recomputed: a removed chunk
-- leaves no ghost posting and no stale bound; its tfs are stored only when the postings left do not
-- all have the tf max_tf (migration 0023). A row is named by its max_tf before the change (the
-- primary key: base_id, term_id, block_no, max_tf; max_tf stays within its tier). Terms whose
-- document frequency drops to 0 are deleted; bm25_terms.max_tf and min_length stay as they were
-- (still bounds, if looser). The chunks' lengths in block_lengths become 0, and a block left with
-- no chunk loses its row.
-- Each statement below touches disjoint rows (one statement cannot modify a row twice), and all
-- read the rows as they were before it: the remaining chunks' lengths are unchanged ones.
WITH gone AS MATERIALIZED (
    SELECT (c.chunk_id / 256)::int AS block_no, array_agg(mod(c.chunk_id, 256)::smallint) AS offsets
    FROM chunks AS c
    WHERE c.base_id = %(base_id)s::int AND c.document_id = %(document_id)s::bigint
    GROUP BY c.chunk_id / 256
),
rewritten AS MATERIALIZED (
    SELECT pb.term_id, pb.max_tf AS old_max_tf, pb.block_no, kept.*
    FROM gone AS g
    JOIN posting_blocks AS pb ON pb.base_id = %(base_id)s::int AND pb.block_no = g.block_no
    JOIN block_lengths AS bl ON bl.base_id = %(base_id)s::int AND bl.block_no = g.block_no
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE p.o = ANY(g.offsets)) AS removed,
               count(*) FILTER (WHERE p.o <> ALL(g.offsets)) AS remaining,
               array_agg(p.o ORDER BY p.o) FILTER (WHERE p.o <> ALL(g.offsets)) AS offsets,
               array_agg(p.tf ORDER BY p.o) FILTER (WHERE p.o <> ALL(g.offsets)) AS tfs,
               max(p.tf) FILTER (WHERE p.o <> ALL(g.offsets)) AS max_tf,
               min(p.tf) FILTER (WHERE p.o <> ALL(g.offsets)) AS min_tf,
               min(bl.lengths[p.o + 1]) FILTER (WHERE p.o <> ALL(g.offsets)) AS min_length,
               min(p.o) FILTER (WHERE p.o <> ALL(g.offsets)) AS first_offset
        FROM (SELECT u.o, coalesce(u.tf, pb.max_tf) AS tf
              FROM unnest(coalesce(pb.offsets, ARRAY[pb.first_offset]), pb.tfs) AS u(o, tf)) AS p
    ) AS kept
    -- Only rows holding one of the chunks are unpacked (&&: the arrays overlap).
    WHERE (CASE WHEN pb.offsets IS NULL THEN pb.first_offset = ANY(g.offsets) ELSE pb.offsets && g.offsets END)
),
emptied_blocks AS (
    DELETE FROM posting_blocks AS pb
    USING rewritten AS r
    WHERE pb.base_id = %(base_id)s::int AND pb.term_id = r.term_id AND pb.max_tf = r.old_max_tf AND pb.block_no = r.block_no
      AND r.remaining = 0
),
shrunk_blocks AS (
    UPDATE posting_blocks AS pb
    SET max_tf = r.max_tf, min_length = r.min_length, first_offset = r.first_offset,
        offsets = CASE WHEN r.remaining > 1 THEN r.offsets END,
        tfs = CASE WHEN r.remaining > 1 AND r.min_tf < r.max_tf THEN r.tfs END
    FROM rewritten AS r
    WHERE pb.base_id = %(base_id)s::int AND pb.term_id = r.term_id AND pb.max_tf = r.old_max_tf AND pb.block_no = r.block_no
      AND r.remaining > 0
),
zeroed_lengths AS MATERIALIZED (
    SELECT bl.block_no,
           array(SELECT CASE WHEN u.o - 1 = ANY(g.offsets) THEN 0 ELSE u.length END
                 FROM unnest(bl.lengths) WITH ORDINALITY AS u(length, o) ORDER BY u.o) AS lengths
    FROM gone AS g
    JOIN block_lengths AS bl ON bl.base_id = %(base_id)s::int AND bl.block_no = g.block_no
),
emptied_lengths AS (
    DELETE FROM block_lengths AS bl
    USING zeroed_lengths AS z
    WHERE bl.base_id = %(base_id)s::int AND bl.block_no = z.block_no AND 0 = ALL(z.lengths)
),
zeroed_blocks AS (
    UPDATE block_lengths AS bl
    SET lengths = z.lengths
    FROM zeroed_lengths AS z
    WHERE bl.base_id = %(base_id)s::int AND bl.block_no = z.block_no AND NOT 0 = ALL(z.lengths)
),
gone_terms AS MATERIALIZED (
    SELECT term_id, sum(removed) AS n FROM rewritten GROUP BY term_id
),
emptied_terms AS (
    DELETE FROM bm25_terms AS t
    USING gone_terms AS g
    WHERE t.base_id = %(base_id)s::int AND t.term_id = g.term_id AND t.df - g.n <= 0
)
UPDATE bm25_terms AS t
SET df = t.df - g.n
FROM gone_terms AS g
WHERE t.base_id = %(base_id)s::int AND t.term_id = g.term_id AND t.df - g.n > 0
