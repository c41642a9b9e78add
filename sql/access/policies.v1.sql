-- Access control by readers (issue 21, part 2), version 1: row-level security on the tables a
-- search, get, ls, notes, facts and the analysts' views read. Created by migration 0020; released
-- files are never edited (a change is a v2 file and a migration).
--
-- Two roles read under these policies; neither is a superuser nor BYPASSRLS, and neither owns a
-- table (the owner, who migrates and indexes, is not subject to them: no FORCE ROW LEVEL SECURITY):
--   metis_search  the service: every read on behalf of principals runs SET LOCAL ROLE metis_search
--                 with SET LOCAL metis.principals (metis_pg.access), whatever role it connected as
--                 (the embedded server's superuser included: SET ROLE drops its rights).
--   metis_views   the owner of the analysts' views (schema metis): a view reads its tables with its
--                 owner's rights, so its rows are this role's, for the groups of the role reading
--                 the view (metis_viewer_groups(): its metis_reader_<group> roles), never the GUC.
-- Documents: readable when they have no readers or share a group with the caller. Chunks, vectors
-- and facts: readable when their document is (the subquery is itself under the documents' policy,
-- and is planned as one hashed subplan per statement).
-- Postings and term statistics: the service reads them whole (BM25 statistics are per base, shared
-- by its groups: docs/security.md says what that reveals); the views only in bases without access
-- control (no source with readers, none letting its documents name theirs). A function called in a
-- policy runs with the rights of the role reading the view, not the view's owner: the subqueries
-- are written out here, where the owner's rights apply.
ALTER TABLE documents ENABLE ROW LEVEL SECURITY;
CREATE POLICY documents_search ON documents FOR SELECT TO metis_search
    USING (readers = '{}' OR readers && (SELECT metis_principals()));
CREATE POLICY documents_views ON documents FOR SELECT TO metis_views
    USING (readers = '{}' OR readers && (SELECT metis_viewer_groups()));

ALTER TABLE chunks ENABLE ROW LEVEL SECURITY;
CREATE POLICY chunks_readable ON chunks FOR SELECT TO metis_search, metis_views
    USING (document_id IN (SELECT d.document_id FROM documents AS d));

ALTER TABLE embeddings ENABLE ROW LEVEL SECURITY;
CREATE POLICY embeddings_readable ON embeddings FOR SELECT TO metis_search, metis_views
    USING (document_id IN (SELECT d.document_id FROM documents AS d));

ALTER TABLE facts ENABLE ROW LEVEL SECURITY;
CREATE POLICY facts_readable ON facts FOR SELECT TO metis_search, metis_views
    USING (document_id IN (SELECT d.document_id FROM documents AS d));

ALTER TABLE posting_blocks ENABLE ROW LEVEL SECURITY;
CREATE POLICY posting_blocks_search ON posting_blocks FOR SELECT TO metis_search USING (true);
CREATE POLICY posting_blocks_views ON posting_blocks FOR SELECT TO metis_views
    USING (NOT EXISTS (SELECT 1 FROM sources AS s WHERE s.base_id = posting_blocks.base_id
                       AND (s.readers <> '{}' OR s.front_matter_readers)));

ALTER TABLE block_lengths ENABLE ROW LEVEL SECURITY;
CREATE POLICY block_lengths_search ON block_lengths FOR SELECT TO metis_search USING (true);
CREATE POLICY block_lengths_views ON block_lengths FOR SELECT TO metis_views
    USING (NOT EXISTS (SELECT 1 FROM sources AS s WHERE s.base_id = block_lengths.base_id
                       AND (s.readers <> '{}' OR s.front_matter_readers)));

ALTER TABLE bm25_terms ENABLE ROW LEVEL SECURITY;
CREATE POLICY bm25_terms_search ON bm25_terms FOR SELECT TO metis_search USING (true);
CREATE POLICY bm25_terms_views ON bm25_terms FOR SELECT TO metis_views
    USING (NOT EXISTS (SELECT 1 FROM sources AS s WHERE s.base_id = bm25_terms.base_id
                       AND (s.readers <> '{}' OR s.front_matter_readers)));
