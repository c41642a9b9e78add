-- Give a source its readers (metis index DIR --readers hr,legal) and whether its documents' own
-- `readers` metadata may narrow them, and give every document of the source its readers again
-- (sql/access/functions.v1.sql: metis_document_readers), in the caller's transaction.
-- Parameters: %(source_id)s int, %(readers)s text[] (lower case; '{}' = every caller; NULL = keep),
--             %(front_matter_readers)s boolean (NULL = keep).
-- Returns: documents, the number of the source's documents whose readers changed.
WITH source AS (
    UPDATE sources
    SET readers = coalesce(%(readers)s::text[], readers),
        front_matter_readers = coalesce(%(front_matter_readers)s::boolean, front_matter_readers)
    WHERE source_id = %(source_id)s
    RETURNING source_id, readers, front_matter_readers
),
changed AS (
    UPDATE documents AS d
    SET readers = metis_document_readers(s.readers, s.front_matter_readers, d.meta)
    FROM source AS s
    WHERE d.source_id = s.source_id
      AND d.readers IS DISTINCT FROM metis_document_readers(s.readers, s.front_matter_readers, d.meta)
    RETURNING d.document_id
)
SELECT count(*) AS documents FROM changed
