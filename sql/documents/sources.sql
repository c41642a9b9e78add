-- The sources of a base with a folder: what `metis index --base B` (no paths) reads again.
-- Parameters: %(base_id)s integer.
-- Returns: name, root (the folder, as stored when it was first indexed), documents,
--   whole_folder (true: the folder itself was indexed, read it whole; false: only single files of
--   it were, read those again), paths (a source of single files: its documents' paths, relative
--   to root; empty for a whole folder).
-- A base's own notes and facts (source metis-<base>) have no folder (root NULL): not listed.
SELECT s.name, s.root, s.whole_folder,
       (SELECT count(*) FROM documents AS d WHERE d.base_id = %(base_id)s AND d.source_id = s.source_id) AS documents,
       CASE WHEN s.whole_folder THEN '{}'::text[]  -- read whole: its paths are not needed
            ELSE (SELECT coalesce(array_agg(d.path ORDER BY d.path), '{}') FROM documents AS d
                  WHERE d.base_id = %(base_id)s AND d.source_id = s.source_id) END AS paths
FROM sources AS s
WHERE s.base_id = %(base_id)s AND s.root IS NOT NULL
ORDER BY s.name
