-- One chunk of a base by its id (a search result's chunk_id), with its document: the MCP tool get.
-- Parameters: %(base_id)s integer; %(chunk_id)s bigint.
-- Returns: document_id.
SELECT c.document_id
FROM chunks AS c
WHERE c.base_id = %(base_id)s AND c.chunk_id = %(chunk_id)s
