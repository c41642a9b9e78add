-- The documents of a base, by path: `metis ls`, `metis get`, the MCP server's resources.
-- Parameters: %(base_id)s integer; %(prefix)s text (NULL: every path; else paths starting with it);
--             %(paths)s text[] (NULL: every path; else these paths exactly);
--             %(source)s text (NULL: every source; else this source only);
--             %(document_ids)s bigint[] (NULL: every document; else these: what search filters keep,
--             sql/search/filtered_documents.sql).
-- Returns: document_id, source, path, title, kind, size_bytes, indexed_at, chunks, tags, author,
--          category, date (the document's own, else the file's modification time), language.
-- The chunk count reads the index uq_chunks_document_ordinal (document_id, ordinal).
SELECT d.document_id, s.name AS source, d.path, d.title, d.kind, d.size_bytes, d.indexed_at,
       d.tags, d.author, d.category, coalesce(d.date, d.modified_at) AS date, d.language,
       (SELECT count(*) FROM chunks AS c WHERE c.base_id = %(base_id)s AND c.document_id = d.document_id) AS chunks
FROM documents AS d
JOIN sources AS s ON s.source_id = d.source_id
WHERE d.base_id = %(base_id)s
  AND (%(prefix)s::text IS NULL OR starts_with(d.path, %(prefix)s::text))
  AND (%(paths)s::text[] IS NULL OR d.path = ANY(%(paths)s::text[]))
  AND (%(source)s::text IS NULL OR s.name = %(source)s::text)
  AND (%(document_ids)s::bigint[] IS NULL OR d.document_id = ANY(%(document_ids)s::bigint[]))
ORDER BY d.path, s.name
