-- The paths of some documents (relative to their source's folder), to name them in a report.
-- Parameters: %(document_ids)s bigint[].
-- Returns: document_id, path.
SELECT d.document_id, d.path
FROM documents AS d
WHERE d.document_id = ANY(%(document_ids)s::bigint[])
