-- View metis.chunk_citations_v2, version 2 of chunk_citations (SPEC F4, F13, F20): every chunk with
-- its citation and the range it spans. Created by migration 0010; released view files are never
-- edited. Version 1 (metis.chunk_citations) shows only the chunk's first line.
-- Returns: base, source, document, title, kind, headings, page_start, page_end, line_start,
--          line_end, text, chunk_id, ordinal.
-- page_start/page_end are set for PDF passages (a chunk never crosses a page: they are equal),
-- line_start/line_end for the others (never both, as in a search result). A search result cites
-- the line of its snippet's sentence, which lies in [line_start, line_end].
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
JOIN documents AS d ON d.document_id = c.document_id
JOIN sources AS s ON s.source_id = d.source_id
JOIN bases AS b ON b.base_id = c.base_id
