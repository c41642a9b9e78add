-- A stored vector of the base's `model` for each text hash, with the text it was made from, so
-- the embedding phase reuses it after comparing that text in full (migration 0017).
-- Parameters: %(base_id)s int, %(model)s text, %(hashes)s bigint[] (distinct).
-- Returns: text_hash, title, headings, text, embedding: at most one chunk per hash.
SELECT h.text_hash, d.title, d.headings, d.text, d.embedding
FROM unnest(%(hashes)s::bigint[]) AS h(text_hash)
CROSS JOIN LATERAL (
    SELECT c.title, c.headings, c.text, e.embedding
    FROM embeddings AS e
    JOIN chunks AS c ON c.base_id = e.base_id AND c.chunk_id = e.chunk_id
    WHERE e.base_id = %(base_id)s AND e.model = %(model)s AND e.text_hash = h.text_hash
    LIMIT 1
) AS d
