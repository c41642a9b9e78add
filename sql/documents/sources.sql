-- The sources of a base with a folder: what `metis index --base B` (no paths) reads again.
-- Parameters: %(base_id)s integer.
-- Returns: name, root (the folder, as stored when it was first indexed), documents,
--   whole_folder (true: the folder itself was indexed, read it whole; false: only single files of
--   it were, read those again), paths (the documents' paths, relative to root).
-- A base's own notes and facts (source metis-<base>) have no folder (root NULL): not listed.
SELECT s.name, s.root, s.whole_folder,
       (SELECT count(*) FROM documents AS d WHERE d.source_id = s.source_id) AS documents,
       (SELECT coalesce(array_agg(d.path ORDER BY d.path), '{}') FROM documents AS d
        WHERE d.source_id = s.source_id) AS paths
FROM sources AS s
WHERE s.base_id = %(base_id)s AND s.root IS NOT NULL
ORDER BY s.name
