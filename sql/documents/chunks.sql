-- The chunks of some documents of a base, in reading order: `metis get`.
-- Parameters: %(base_id)s integer; %(document_ids)s bigint[].
-- Returns: document_id, chunk_id, ordinal, line, line_end (NULL: pdf, docx, HTML before revision 0009), page, headings, text,
-- col (the column where the chunk starts when an earlier chunk holds text of its first line, else NULL).
SELECT c.document_id, c.chunk_id, c.ordinal, c.line, c.line_end, c.page, c.headings, c.text, c.col
FROM chunks AS c
WHERE c.base_id = %(base_id)s AND c.document_id = ANY(%(document_ids)s::bigint[])
ORDER BY c.document_id, c.ordinal
