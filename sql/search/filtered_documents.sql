-- The documents of the bases the filters keep: asked when a filtered search found nothing, to tell
-- "the filters match no document" (warning FILTERS_MATCH_NOTHING) from "nothing matched the
-- question", and by `metis ls` with filters. The same conditions as allowed_documents in hybrid.sql.
-- Parameters:
--   %(base_ids)s     int[]   bases searched
--   %(path_prefix)s  text    NULL = no filter; else documents whose path starts with it
--   %(kinds)s        text[]  NULL = no filter; else documents of these kinds
--   %(sources)s      text[]  NULL = no filter; else documents of these sources
--   %(exclude_prefixes)s text[] NULL = no filter; else documents whose path starts with none of them
--   %(tags_any)s, %(tags_all)s, %(exclude_tags)s  text[]  NULL = no filter; else documents with one /
--                                every / none of these tags (lower case, as stored)
--   %(authors)s, %(categories)s  text[]  NULL = no filter; else documents of one of these
--   %(since)s, %(until)s timestamptz  NULL = no bound; else documents whose date (else the file's
--                                modification time) is >= since and < until (undated ones are dropped)
--   %(meta)s            jsonb    NULL = no filter; else [[alternative, ...], ...]: the document's meta
--                                contains one alternative of every requirement (retrieval.Filters.meta)
-- Returns: document_id, one row per document kept.
SELECT d.document_id
FROM documents AS d
JOIN sources AS s ON s.source_id = d.source_id
WHERE d.base_id = ANY(%(base_ids)s::int[])
  AND (%(path_prefix)s::text IS NULL OR starts_with(d.path, %(path_prefix)s::text))
  AND (%(kinds)s::text[] IS NULL OR d.kind = ANY(%(kinds)s::text[]))
  AND (%(sources)s::text[] IS NULL OR s.name = ANY(%(sources)s::text[]))
  AND (%(exclude_prefixes)s::text[] IS NULL
       OR NOT EXISTS (SELECT 1 FROM unnest(%(exclude_prefixes)s::text[]) AS x(prefix) WHERE starts_with(d.path, x.prefix)))
  -- Metadata (issue 21): tags (GIN ix_documents_tags), author, category, dates, the other keys.
  AND (%(tags_any)s::text[] IS NULL OR d.tags && %(tags_any)s::text[])
  AND (%(tags_all)s::text[] IS NULL OR d.tags @> %(tags_all)s::text[])
  AND (%(exclude_tags)s::text[] IS NULL OR NOT d.tags && %(exclude_tags)s::text[])
  AND (%(authors)s::text[] IS NULL OR d.author = ANY(%(authors)s::text[])
           OR d.meta->'authors' ?| %(authors)s::text[])  -- every author of a list (meta.authors)
  AND (%(categories)s::text[] IS NULL OR d.category = ANY(%(categories)s::text[]))
  AND (%(since)s::timestamptz IS NULL OR coalesce(d.date, d.modified_at) >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR coalesce(d.date, d.modified_at) < %(until)s::timestamptz)
  -- meta: an array of requirements, each an array of alternatives; every requirement holds
  -- when the document's meta contains one of its alternatives.
  AND (%(meta)s::jsonb IS NULL
       OR NOT EXISTS (SELECT 1 FROM jsonb_array_elements(%(meta)s::jsonb) AS r(options)
                      WHERE NOT EXISTS (SELECT 1 FROM jsonb_array_elements(r.options) AS o(value)
                                        WHERE d.meta @> o.value)))
