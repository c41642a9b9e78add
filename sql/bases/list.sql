-- Bases with their health: documents, chunks, chunks without a vector of the base's model, status.
-- Parameters: %(name)s text (NULL = every base), %(lock_space)s int (storage.INDEXER_LOCK_SPACE).
-- Returns: base_id, name, kind, spec, status, interrupted, last_indexed_at, documents, chunks,
--          chunks_without_vector.
--
-- Status (SPEC F3): 'indexing' only while a live indexer holds the base's session-level
-- advisory lock (key (lock_space, base_id): base_is_indexing, migration 0005); a base whose row still says
-- 'indexing' but whose indexer is gone (a killed process) shows 'waiting' when chunks lack a
-- vector, else 'ready', with interrupted = true: the next `metis index` finishes the job.
SELECT b.base_id, b.name, b.kind, b.spec,
       CASE WHEN live.indexing THEN 'indexing'
            WHEN b.status = 'indexing' THEN CASE WHEN h.chunks_without_vector > 0 THEN 'waiting' ELSE 'ready' END
            ELSE b.status
       END AS status,
       (b.status = 'indexing' AND NOT live.indexing) AS interrupted,
       b.last_indexed_at, h.documents, h.chunks, h.chunks_without_vector
FROM bases AS b
CROSS JOIN LATERAL (SELECT base_is_indexing(b.base_id, %(lock_space)s::int) AS indexing) AS live
CROSS JOIN LATERAL (
    SELECT (SELECT count(*) FROM documents AS d WHERE d.base_id = b.base_id) AS documents,
           (SELECT count(*) FROM chunks AS c WHERE c.base_id = b.base_id) AS chunks,
           chunks_without_vector(b.base_id, (b.spec ->> 'embedding_model') || ':' || (b.spec ->> 'embedding_dim'))
             AS chunks_without_vector
) AS h
WHERE %(name)s::text IS NULL OR b.name = %(name)s::text
ORDER BY b.name
