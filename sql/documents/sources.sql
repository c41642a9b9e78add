-- The folder sources of a base: what `metis index --base B` (no paths) reads again.
-- Parameters: %(base_id)s integer.
-- Returns: name, root (the folder, as stored when it was first indexed), documents.
-- A base's own notes and facts (source metis-<base>) have no folder (root NULL): not listed.
SELECT s.name, s.root,
       (SELECT count(*) FROM documents AS d WHERE d.source_id = s.source_id) AS documents
FROM sources AS s
WHERE s.base_id = %(base_id)s AND s.root IS NOT NULL
ORDER BY s.name
