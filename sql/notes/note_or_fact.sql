-- Whether a document of a base's notes and facts source is a fact (a note is not).
-- Parameters: %(document_id)s bigint, %(base_id)s int, %(source)s text (metis-<base>).
-- Returns: one row (is_fact) when the document is in that source, none otherwise.
SELECT f.document_id IS NOT NULL AS is_fact
FROM documents AS d
JOIN sources AS s USING (source_id)
LEFT JOIN facts AS f ON f.base_id = d.base_id AND f.document_id = d.document_id
WHERE d.document_id = %(document_id)s AND d.base_id = %(base_id)s AND s.name = %(source)s
