-- One chunk of a base by its id (a search result's chunk_id), with its document: the MCP tool get.
-- Parameters: %(base_id)s integer; %(chunk_id)s bigint.
-- Returns: document_id, path, source (the document's, to list it with documents/list).
SELECT c.document_id, d.path, s.name AS source
FROM chunks AS c
JOIN documents AS d ON d.base_id = c.base_id AND d.document_id = c.document_id
JOIN sources AS s ON s.source_id = d.source_id
WHERE c.base_id = %(base_id)s AND c.chunk_id = %(chunk_id)s
