-- First line of every chunk of some documents of a base: where each passage starts.
-- SPEC F16 (passage-level judgments: a judged line belongs to the chunk starting at or before it).
--
-- Parameters:
--   %(base_id)s    int     the base
--   %(documents)s  text[]  document paths (relative to their source)
--
-- Returns: document (path), line (1-based first line of the chunk), chunk_id.
SELECT d.path AS document, c.line, c.chunk_id
FROM chunks AS c
JOIN documents AS d ON d.base_id = c.base_id AND d.document_id = c.document_id
WHERE c.base_id = %(base_id)s::int
  AND d.path = ANY(%(documents)s::text[])
  AND c.line IS NOT NULL
ORDER BY d.path, c.line, c.chunk_id
