-- How many documents of the bases searched the filters keep: asked only when a filtered search
-- found nothing, to tell "the filters match no document" (warning FILTERS_MATCH_NOTHING) from
-- "nothing matched the question". The same conditions as allowed_documents in hybrid.sql.
-- Parameters:
--   %(base_ids)s     int[]   bases searched
--   %(path_prefix)s  text    NULL = no filter; else documents whose path starts with it
--   %(kinds)s        text[]  NULL = no filter; else documents of these kinds
--   %(sources)s      text[]  NULL = no filter; else documents of these sources
-- Returns: documents (bigint).
SELECT count(*) AS documents
FROM documents AS d
JOIN sources AS s ON s.source_id = d.source_id
WHERE d.base_id = ANY(%(base_ids)s::int[])
  AND (%(path_prefix)s::text IS NULL OR starts_with(d.path, %(path_prefix)s::text))
  AND (%(kinds)s::text[] IS NULL OR d.kind = ANY(%(kinds)s::text[]))
  AND (%(sources)s::text[] IS NULL OR s.name = ANY(%(sources)s::text[]))
