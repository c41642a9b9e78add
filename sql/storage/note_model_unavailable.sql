-- Note every chunk of a base still without a vector of a model as 'model_unavailable' (vector_notes,
-- migration 0018): the model did not answer, so the next `metis index` sends them again. A chunk
-- the service refused stays 'refused' (unless it was refused at another max_chars: it was to be sent
-- again, and is now waiting for the model like the others).
-- Parameters: %(base_id)s int, %(model)s text, %(detail)s text (why: the model's error),
--             %(max_chars)s int (NULL: texts not cut).
INSERT INTO vector_notes AS v (base_id, chunk_id, model, reason, detail, max_chars)
SELECT c.base_id, c.chunk_id, %(model)s, 'model_unavailable', %(detail)s, %(max_chars)s::int
FROM chunks AS c
WHERE c.base_id = %(base_id)s
  AND NOT EXISTS (SELECT 1 FROM embeddings AS e
                  WHERE e.base_id = c.base_id AND e.chunk_id = c.chunk_id AND e.model = %(model)s)
ON CONFLICT (base_id, chunk_id, model) DO UPDATE
SET reason = 'model_unavailable', detail = excluded.detail, max_chars = excluded.max_chars,
    noted_at = excluded.noted_at  -- the column default, now(): Citus refuses a function here
WHERE v.reason <> 'refused' OR v.max_chars IS DISTINCT FROM excluded.max_chars
