-- The notes of a base (SPEC F2): documents of its source metis-<base> that are not facts.
-- Parameters: %(base_id)s int, %(source)s text (metis-<base>).
-- Returns: note_id, title, path, text (its chunks joined by blank lines), created_at; oldest first.
SELECT d.document_id AS note_id, d.title, d.path,
       coalesce(string_agg(c.text, E'\n\n' ORDER BY c.ordinal), '') AS text,
       d.indexed_at AS created_at
FROM documents AS d
JOIN sources AS s ON s.source_id = d.source_id
LEFT JOIN chunks AS c ON c.base_id = d.base_id AND c.document_id = d.document_id
WHERE d.base_id = %(base_id)s
  AND s.name = %(source)s
  AND NOT EXISTS (SELECT 1 FROM facts AS f WHERE f.base_id = d.base_id AND f.document_id = d.document_id)
-- base_id too: under Citus the tables are keyed (base_id, document_id) (sql/citus/keys.sql).
GROUP BY d.base_id, d.document_id
ORDER BY d.document_id
