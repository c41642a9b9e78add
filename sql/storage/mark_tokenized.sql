-- Record that a run re-read (re-tokenized) the documents of some folder sources of a base, and when
-- every folder source holding documents has been re-read by tokenizer %(version)s, record that
-- version in the base's spec (BaseSpec.tokenizer_version). Until then the sources done so far are
-- kept in spec->'retokenizing' = {"version": V, "sources": [ids]} (one source per run with
-- `metis index --base B`, which reads each folder again). The notes and facts source (root NULL)
-- does not count.
-- The spec's field_weight (the weight the run's terms were made with) is recorded with the version.
-- Parameters: %(base_id)s int, %(source_ids)s int[] (the sources the run read whole), %(version)s int,
-- %(field_weight)s int.
-- Returns: one row: done = whether the version is recorded, spec = the base's spec to write
-- (storage/set_spec.sql). A read, then a write of that value: Citus refuses the UPDATE of the
-- reference table bases with a CASE of sub-selects reading documents, a distributed table
-- ("non-IMMUTABLE functions are not allowed in CASE or COALESCE statements"); the indexer's lock
-- on the base keeps another run from writing its spec in between.
WITH previous AS (
    SELECT CASE WHEN (b.spec->'retokenizing'->>'version')::int = %(version)s::int
                THEN b.spec->'retokenizing'->'sources' ELSE '[]'::jsonb END AS sources
    FROM bases AS b
    WHERE b.base_id = %(base_id)s
),
read_so_far AS (
    SELECT coalesce(array_agg(DISTINCT id ORDER BY id), '{}'::int[]) AS ids
    FROM (
        SELECT jsonb_array_elements_text(p.sources)::int AS id FROM previous AS p
        UNION
        SELECT unnest(%(source_ids)s::int[])
    ) AS u
),
complete AS (
    SELECT NOT EXISTS (
        SELECT 1
        FROM documents AS d
        JOIN sources AS s ON s.source_id = d.source_id
        WHERE d.base_id = %(base_id)s
          AND s.root IS NOT NULL
          AND NOT (d.source_id = ANY((SELECT ids FROM read_so_far)::int[]))
    ) AS done
)
SELECT (SELECT done FROM complete) AS done,
       CASE WHEN (SELECT done FROM complete)
            THEN jsonb_set(jsonb_set(b.spec - 'retokenizing', '{tokenizer_version}', to_jsonb(%(version)s::int)),
                           '{field_weight}', to_jsonb(%(field_weight)s::int))
            ELSE jsonb_set(b.spec, '{retokenizing}',
                           jsonb_build_object('version', %(version)s::int,
                                              'sources', to_jsonb((SELECT ids FROM read_so_far))))
       END AS spec
FROM bases AS b
WHERE b.base_id = %(base_id)s
