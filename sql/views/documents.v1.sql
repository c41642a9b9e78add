-- View metis.documents (SPEC F20, issue 21): one row per document with what it says about itself.
-- Created by migration 0015; released view files are never edited.
-- Returns: base, source, document, title, kind, tags, author, category, date, modified_at,
--          language, meta, size_bytes, chunks, indexed_at.
-- date is the document's own (front matter, <meta>, PDF info, DOCX core properties); modified_at
-- the file's modification time when it was read; a search's since/until use date, else modified_at.
SELECT b.name        AS base,
       s.name        AS source,
       d.path        AS document,
       d.title       AS title,
       d.kind        AS kind,
       d.tags        AS tags,
       d.author      AS author,
       d.category    AS category,
       d.date        AS date,
       d.modified_at AS modified_at,
       d.language    AS language,
       d.meta        AS meta,
       d.size_bytes  AS size_bytes,
       (SELECT count(*) FROM chunks AS c WHERE c.base_id = d.base_id AND c.document_id = d.document_id) AS chunks,
       d.indexed_at  AS indexed_at
FROM documents AS d
JOIN sources AS s ON s.source_id = d.source_id
JOIN bases AS b ON b.base_id = d.base_id
