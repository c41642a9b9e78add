-- View metis.postings_v2 (and metis.postings), version 3 of postings (SPEC F6): the BM25 postings
-- of every base, one row per (term, chunk), unpacked from the posting blocks. Created by migration
-- 0023 (issue 24), whose rows store no tfs when every posting of a row has the tf max_tf; released
-- view files are never edited. The columns and rows of version 2.
-- Returns: base, base_id, term, chunk_id, document_id, tf, chunk_terms.
-- Reading it unpacks every block: filter on base (or base_id) and term.
SELECT b.name                                     AS base,
       pb.base_id                                 AS base_id,
       t.term                                     AS term,
       pb.block_no::bigint * 256 + p.o            AS chunk_id,
       c.document_id                              AS document_id,
       p.tf::integer                              AS tf,
       bl.lengths[p.o + 1]                        AS chunk_terms
FROM posting_blocks AS pb
JOIN bm25_terms AS t ON t.base_id = pb.base_id AND t.term_id = pb.term_id
JOIN bases AS b ON b.base_id = pb.base_id
CROSS JOIN LATERAL (SELECT u.o, coalesce(u.tf, pb.max_tf) AS tf
                    FROM unnest(coalesce(pb.offsets, ARRAY[pb.first_offset]), pb.tfs) AS u(o, tf)) AS p
LEFT JOIN block_lengths AS bl ON bl.base_id = pb.base_id AND bl.block_no = pb.block_no
LEFT JOIN chunks AS c ON c.base_id = pb.base_id AND c.chunk_id = pb.block_no::bigint * 256 + p.o
