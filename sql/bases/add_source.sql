-- Create a base's source, or give an existing one its folder (a source named before its folder
-- was known); once a source's folder is indexed whole it stays so (what `metis index --base B`
-- reads again).
-- Parameters: %(base_id)s int, %(name)s text, %(root)s text (NULL: the notes and facts source),
--             %(whole_folder)s boolean.
-- Returns: source_id.
INSERT INTO sources (base_id, name, root, whole_folder)
VALUES (%(base_id)s, %(name)s, %(root)s, %(whole_folder)s)
ON CONFLICT (base_id, name) DO UPDATE
SET root = EXCLUDED.root,
    whole_folder = sources.whole_folder OR EXCLUDED.whole_folder
RETURNING source_id
