-- What a search must know of its bases to warn (SPEC F14): cheap, read per search.
-- Chunks without a vector are counted only for a base that is waiting (or was left
-- 'indexing' by a process that is gone); status as in bases/list.sql.
-- Parameters: %(base_ids)s int[], %(lock_space)s int (storage.INDEXER_LOCK_SPACE).
-- Returns: name, status, last_indexed_at, chunks, sources (count), source_names, chunks_without_vector.
SELECT b.name,
       CASE WHEN live.indexing THEN 'indexing'
            WHEN b.status = 'indexing' THEN CASE WHEN missing.n > 0 THEN 'waiting' ELSE 'ready' END
            ELSE b.status
       END AS status,
       b.last_indexed_at,
       coalesce(t.chunk_count, 0) AS chunks,
       (SELECT count(*) FROM sources AS s WHERE s.base_id = b.base_id) AS sources,
       (SELECT coalesce(array_agg(s.name ORDER BY s.name), '{}') FROM sources AS s
         WHERE s.base_id = b.base_id) AS source_names,
       missing.n AS chunks_without_vector
FROM bases AS b
LEFT JOIN bm25_totals AS t ON t.base_id = b.base_id
CROSS JOIN LATERAL (SELECT base_is_indexing(b.base_id, %(lock_space)s::int) AS indexing) AS live
CROSS JOIN LATERAL (
    SELECT CASE WHEN b.status IN ('waiting', 'indexing') AND NOT live.indexing
                THEN chunks_without_vector(b.base_id,
                                           (b.spec ->> 'embedding_model') || ':' || (b.spec ->> 'embedding_dim'))
                ELSE 0
           END AS n
) AS missing
WHERE b.base_id = ANY(%(base_ids)s::int[])
