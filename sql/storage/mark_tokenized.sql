-- Record the tokenizer version of a base's postings in its spec (BaseSpec.tokenizer_version),
-- unless a document of a folder source that the run did not read is left (its postings are
-- still the older tokenizer's). The notes and facts source (root NULL) does not count.
-- Parameters: %(base_id)s int, %(source_ids)s int[] (the sources the run read), %(version)s int.
-- Returns: one row (base_id) when the spec was updated, none otherwise.
UPDATE bases AS b
SET spec = jsonb_set(b.spec, '{tokenizer_version}', to_jsonb(%(version)s::int))
WHERE b.base_id = %(base_id)s
  AND NOT EXISTS (
      SELECT 1
      FROM documents AS d
      JOIN sources AS s ON s.source_id = d.source_id
      WHERE d.base_id = %(base_id)s
        AND s.root IS NOT NULL
        AND NOT (d.source_id = ANY(%(source_ids)s::int[]))
  )
RETURNING b.base_id
