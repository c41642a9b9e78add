-- Citus, step 3a of 3 (after `metis db upgrade`): every large table keyed by base_id first.
--
-- Citus distributes a table by one column (here base_id) and enforces a primary key, a
-- unique constraint or a foreign key between distributed tables only when it holds that
-- column. The migrations key documents, chunks, embeddings and facts by their own id; this
-- script re-keys them (base_id, id) and makes every foreign key between them carry base_id,
-- so that each base's rows - and every constraint check of them - stay on one shard.
--
-- Plain PostgreSQL: it runs (and metis runs on the result) without Citus too;
-- tests/test_citus_schema.py applies it to the embedded PostgreSQL and indexes, searches,
-- re-indexes, deletes and drops on it. Idempotent: it does nothing once documents_pkey is gone.
-- Run with psql -v ON_ERROR_STOP=1, before distribute.sql.
DO $keys$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'documents_pkey'
                   AND conrelid = 'documents'::regclass) THEN
        RAISE NOTICE 'metis: the tables are keyed by base_id already';
        RETURN;
    END IF;

    -- The foreign keys that point at the single-column keys go first.
    ALTER TABLE chunks DROP CONSTRAINT chunks_document_id_fkey;
    ALTER TABLE embeddings DROP CONSTRAINT embeddings_chunk_id_fkey;
    ALTER TABLE vector_notes DROP CONSTRAINT vector_notes_chunk_id_fkey;
    ALTER TABLE facts DROP CONSTRAINT facts_document_id_fkey;
    ALTER TABLE facts DROP CONSTRAINT facts_superseded_by_fkey;

    ALTER TABLE documents DROP CONSTRAINT documents_pkey;
    ALTER TABLE documents ADD CONSTRAINT pk_documents PRIMARY KEY (base_id, document_id);
    ALTER TABLE documents DROP CONSTRAINT uq_documents_source_path;
    ALTER TABLE documents ADD CONSTRAINT uq_documents_source_path UNIQUE (base_id, source_id, path);

    ALTER TABLE chunks DROP CONSTRAINT chunks_pkey;
    ALTER TABLE chunks ADD CONSTRAINT pk_chunks PRIMARY KEY (base_id, chunk_id);
    ALTER TABLE chunks DROP CONSTRAINT uq_chunks_document_ordinal;
    ALTER TABLE chunks ADD CONSTRAINT uq_chunks_document_ordinal UNIQUE (base_id, document_id, ordinal);
    ALTER TABLE chunks ADD CONSTRAINT chunks_document_fkey FOREIGN KEY (base_id, document_id)
        REFERENCES documents (base_id, document_id) ON DELETE CASCADE;

    ALTER TABLE embeddings DROP CONSTRAINT pk_embeddings;
    ALTER TABLE embeddings ADD CONSTRAINT pk_embeddings PRIMARY KEY (base_id, chunk_id, model);
    ALTER TABLE embeddings ADD CONSTRAINT embeddings_chunk_fkey FOREIGN KEY (base_id, chunk_id)
        REFERENCES chunks (base_id, chunk_id) ON DELETE CASCADE;
    ALTER TABLE vector_notes ADD CONSTRAINT vector_notes_chunk_fkey FOREIGN KEY (base_id, chunk_id)
        REFERENCES chunks (base_id, chunk_id) ON DELETE CASCADE;

    ALTER TABLE facts DROP CONSTRAINT facts_pkey;
    ALTER TABLE facts ADD CONSTRAINT pk_facts PRIMARY KEY (base_id, document_id);
    ALTER TABLE facts ADD CONSTRAINT facts_document_fkey FOREIGN KEY (base_id, document_id)
        REFERENCES documents (base_id, document_id) ON DELETE CASCADE;
    -- No ON DELETE action: Citus refuses SET NULL on a foreign key holding the distribution
    -- column, and since migration 0013 no shape of the schema has it (a fact that replaced
    -- another is only deleted with its base, in the statement that deletes the other too).
    ALTER TABLE facts ADD CONSTRAINT facts_superseded_by_fkey FOREIGN KEY (base_id, superseded_by)
        REFERENCES documents (base_id, document_id);
END
$keys$;
