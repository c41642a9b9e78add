-- Note why chunks have no vector of a model (or one of a cut text): vector_notes, migration 0018.
-- A chunk deleted meanwhile is skipped; a chunk noted already takes the new reason.
-- Parameters: %(base_id)s int, %(model)s text, %(max_chars)s int (the characters texts were cut to;
--             NULL: not cut), %(chunk_ids)s bigint[], %(reasons)s text[] ('refused', 'cut',
--             'model_unavailable'), %(details)s text[] (one per chunk: the model's answer, or '').
INSERT INTO vector_notes AS v (base_id, chunk_id, model, reason, detail, max_chars)
SELECT %(base_id)s, n.chunk_id, %(model)s, n.reason, n.detail, %(max_chars)s::int
FROM unnest(%(chunk_ids)s::bigint[], %(reasons)s::text[], %(details)s::text[]) AS n (chunk_id, reason, detail)
WHERE EXISTS (SELECT 1 FROM chunks AS c WHERE c.base_id = %(base_id)s AND c.chunk_id = n.chunk_id)
ON CONFLICT (base_id, chunk_id, model) DO UPDATE
SET reason = excluded.reason, detail = excluded.detail, max_chars = excluded.max_chars,
    noted_at = excluded.noted_at  -- the column default, now(): Citus refuses a function here
