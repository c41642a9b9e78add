-- View metis.postings_v2, version 2 of postings (SPEC F6): the BM25 postings of every base, one row
-- per (term, chunk), unpacked from the posting blocks. Created by migration 0013; released view
-- files are never edited. The columns and rows of version 1 (metis.postings), its join to chunks
-- on base_id too: on Citus version 1 is refused (a join off the distribution column).
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
CROSS JOIN LATERAL unnest(coalesce(pb.offsets, ARRAY[pb.first_offset]),
                          coalesce(pb.tfs, ARRAY[pb.max_tf])) AS p(o, tf)
LEFT JOIN block_lengths AS bl ON bl.base_id = pb.base_id AND bl.block_no = pb.block_no
LEFT JOIN chunks AS c ON c.base_id = pb.base_id AND c.chunk_id = pb.block_no::bigint * 256 + p.o
