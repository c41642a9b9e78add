-- View metis.chunk_citations_v5, version 5 of chunk_citations (issue 25): version 4's columns and
-- rows, and page_label: the printed label of the chunk's PDF page when the PDF has page labels
-- (/PageLabels: page 19 may print "16", front matter "xii"), NULL otherwise and for other kinds.
-- Created by migration 0019; released view files are never edited.
-- Returns: base, source, document, title, kind, headings, page_start, page_end, page_label,
--          line_start, line_end, text, chunk_id, ordinal, tags, author, category, date.
SELECT b.name       AS base,
       s.name       AS source,
       d.path       AS document,
       c.title      AS title,
       d.kind       AS kind,
       c.headings   AS headings,
       c.page       AS page_start,
       c.page       AS page_end,
       c.page_label AS page_label,
       CASE WHEN c.page IS NULL THEN c.line END AS line_start,
       CASE WHEN c.page IS NULL THEN coalesce(c.line_end, c.line) END AS line_end,
       c.text       AS text,
       c.chunk_id   AS chunk_id,
       c.ordinal    AS ordinal,
       d.tags       AS tags,
       d.author     AS author,
       d.category   AS category,
       coalesce(d.date, d.modified_at) AS date
FROM chunks AS c
JOIN documents AS d ON d.base_id = c.base_id AND d.document_id = c.document_id
JOIN sources AS s ON s.source_id = d.source_id
JOIN bases AS b ON b.base_id = c.base_id
