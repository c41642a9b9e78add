-- View metis.chunk_citations, version 1 (SPEC F20): every chunk with its citation.
-- Created by migration 0003; released view files are never edited (a change is a .v2.sql file
-- and a new migration that restates the whole view).
-- Returns: base, source, document, title, kind, headings, page, line, text, chunk_id, ordinal.
-- page is set for PDF passages, line for the others (never both, as in a search result).
SELECT b.name       AS base,
       s.name       AS source,
       d.path       AS document,
       c.title      AS title,
       d.kind       AS kind,
       c.headings   AS headings,
       c.page       AS page,
       CASE WHEN c.page IS NULL THEN c.line END AS line,
       c.text       AS text,
       c.chunk_id   AS chunk_id,
       c.ordinal    AS ordinal
FROM chunks AS c
JOIN documents AS d ON d.document_id = c.document_id
JOIN sources AS s ON s.source_id = d.source_id
JOIN bases AS b ON b.base_id = c.base_id
