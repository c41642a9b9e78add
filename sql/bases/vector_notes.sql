-- Chunks of each base noted in vector_notes (migration 0018) for the base's own model, by reason:
-- 'refused' and 'model_unavailable' (no vector), 'cut' (a vector of a cut text).
-- Parameters: %(base_ids)s int[].
-- Returns: base_id, reason, chunks.
SELECT n.base_id, n.reason, count(*) AS chunks
FROM vector_notes AS n
JOIN bases AS b ON b.base_id = n.base_id
WHERE n.base_id = ANY(%(base_ids)s::int[])
  AND n.model = (b.spec ->> 'embedding_model') || ':' || (b.spec ->> 'embedding_dim')
GROUP BY n.base_id, n.reason
