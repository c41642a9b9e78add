-- View metis.chunk_citations_v3, version 3 of chunk_citations (SPEC F4, F13, F20): every chunk with
-- its citation and the range it spans. Created by migration 0013; released view files are never
-- edited. The columns and rows of version 2 (metis.chunk_citations_v2), its join of chunks to
-- documents on base_id too: on Citus (tables distributed by base_id) versions 1 and 2 are refused
-- ("the query contains a join that requires repartitioning"); this one runs on each worker.
-- Returns: base, source, document, title, kind, headings, page_start, page_end, line_start,
--          line_end, text, chunk_id, ordinal.
SELECT b.name       AS base,
       s.name       AS source,
       d.path       AS document,
       c.title      AS title,
       d.kind       AS kind,
       c.headings   AS headings,
       c.page       AS page_start,
       c.page       AS page_end,
       CASE WHEN c.page IS NULL THEN c.line END AS line_start,
       CASE WHEN c.page IS NULL THEN coalesce(c.line_end, c.line) END AS line_end,
       c.text       AS text,
       c.chunk_id   AS chunk_id,
       c.ordinal    AS ordinal
FROM chunks AS c
JOIN documents AS d ON d.base_id = c.base_id AND d.document_id = c.document_id
JOIN sources AS s ON s.source_id = d.source_id
JOIN bases AS b ON b.base_id = c.base_id
