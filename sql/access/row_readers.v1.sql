-- Access control by readers (issue 21, part 2): the chunks, vectors and facts carry their
-- document's readers (a column of their own, kept equal to documents.readers by the triggers
-- below), which their policies (sql/access/policies.v2.sql) compare with the principals, as the
-- documents' policy does. Created by migration 0024; released files are never edited (a change is
-- a v2 file and a migration).
--
-- Why (docs/security.md, "Performance"): version 1's policies on
-- chunks, embeddings and facts were `document_id IN (SELECT d.document_id FROM documents AS d)`.
-- PostgreSQL plans that as a hashed SubPlan that reads every readable document of every base, once
-- per reference to the table in a statement, and plans the subquery (with the documents' own
-- policy) once per reference too: the search statement references these tables six times (the
-- dense scan, the complete scores' vector lookups, bm25_chunk_scores, the copies' texts, the final
-- fetch), for ten rows in the final fetch. A column of the row itself is a per-row comparison of
-- two short arrays, with the principals read once per statement (an InitPlan).
--
-- The visibility is version 1's exactly: a chunk, vector or fact is readable when its document is,
-- i.e. when its document's readers are '{}' or share a group with the caller. A row's readers are
-- its document's at every moment a reader can see: given on INSERT (and on an UPDATE moving it to
-- another document) by a BEFORE trigger from the document, whatever the writer gave; changed with
-- the document's in the same statement (an AFTER UPDATE trigger on documents: set_source_readers).
-- A row whose document is missing gets '{!none}' (no group: the operator only).

-- A new or moved chunk, vector or fact: its document's readers.
CREATE OR REPLACE FUNCTION metis_row_readers() RETURNS trigger
LANGUAGE plpgsql AS $function$
BEGIN
    NEW.readers := coalesce((SELECT d.readers FROM documents AS d WHERE d.document_id = NEW.document_id), '{!none}');
    RETURN NEW;
END
$function$;

-- A document whose readers changed: its chunks, vectors and facts follow, in the same statement.
CREATE OR REPLACE FUNCTION metis_document_readers_changed() RETURNS trigger
LANGUAGE plpgsql AS $function$
BEGIN
    UPDATE chunks SET readers = NEW.readers
    WHERE document_id = NEW.document_id AND readers IS DISTINCT FROM NEW.readers;
    UPDATE embeddings SET readers = NEW.readers
    WHERE document_id = NEW.document_id AND readers IS DISTINCT FROM NEW.readers;
    UPDATE facts SET readers = NEW.readers
    WHERE document_id = NEW.document_id AND readers IS DISTINCT FROM NEW.readers;
    RETURN NULL;
END
$function$;

CREATE TRIGGER chunks_readers BEFORE INSERT OR UPDATE OF document_id ON chunks
    FOR EACH ROW EXECUTE FUNCTION metis_row_readers();
CREATE TRIGGER embeddings_readers BEFORE INSERT OR UPDATE OF document_id ON embeddings
    FOR EACH ROW EXECUTE FUNCTION metis_row_readers();
CREATE TRIGGER facts_readers BEFORE INSERT OR UPDATE OF document_id ON facts
    FOR EACH ROW EXECUTE FUNCTION metis_row_readers();
CREATE TRIGGER documents_readers_changed AFTER UPDATE OF readers ON documents
    FOR EACH ROW WHEN (OLD.readers IS DISTINCT FROM NEW.readers)
    EXECUTE FUNCTION metis_document_readers_changed();

-- The rows written before this version: only those of documents with readers differ from the
-- column's default.
UPDATE chunks AS c SET readers = d.readers FROM documents AS d
WHERE d.document_id = c.document_id AND d.readers <> '{}';
UPDATE embeddings AS e SET readers = d.readers FROM documents AS d
WHERE d.document_id = e.document_id AND d.readers <> '{}';
UPDATE facts AS f SET readers = d.readers FROM documents AS d
WHERE d.document_id = f.document_id AND d.readers <> '{}';
