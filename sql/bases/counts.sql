-- Documents and chunks of each base, for bases/list.sql.
-- Parameters: %(base_ids)s int[].
-- Returns: base_id, documents, chunks, vectors_reused (chunks whose vector of the base's model is
--          another's of the same embedding text: hashed vectors minus distinct hashes, migration
--          0017) — one row per base given.
-- Counted grouped by base_id, each table filtered by the bases itself: on Citus one base is a
-- router query on its worker (it answers while another worker is down), several are counted by
-- their workers at once.
SELECT x.base_id, coalesce(d.documents, 0) AS documents, coalesce(c.chunks, 0) AS chunks,
       coalesce(v.vectors_reused, 0) AS vectors_reused
FROM unnest(%(base_ids)s::int[]) AS x (base_id)
LEFT JOIN (SELECT base_id, count(*) AS documents FROM documents
           WHERE base_id = ANY(%(base_ids)s::int[]) GROUP BY base_id) AS d ON d.base_id = x.base_id
LEFT JOIN (SELECT base_id, count(*) AS chunks FROM chunks
           WHERE base_id = ANY(%(base_ids)s::int[]) GROUP BY base_id) AS c ON c.base_id = x.base_id
LEFT JOIN (SELECT e.base_id, count(e.text_hash) - count(DISTINCT e.text_hash) AS vectors_reused
           FROM embeddings AS e
           JOIN bases AS b ON b.base_id = e.base_id
           WHERE e.base_id = ANY(%(base_ids)s::int[]) AND e.text_hash IS NOT NULL
             AND e.model = (b.spec ->> 'embedding_model') || ':' || (b.spec ->> 'embedding_dim')
           GROUP BY e.base_id) AS v ON v.base_id = x.base_id
