-- Access control by readers (issue 21, part 2), version 2: the row-level security policies on the
-- tables a search, get, ls, notes, facts and the analysts' views read, all of them (this file is
-- the whole set: it drops and creates each policy of version 1). Created by migration 0024;
-- released files are never edited (a change is a v3 file and a migration). The roles, and what
-- each policy keeps, are as in version 1 (sql/access/policies.v1.sql), but for chunks, embeddings
-- and facts:
--
-- Version 1 kept them with `document_id IN (SELECT d.document_id FROM documents AS d)`: the same
-- rows, but PostgreSQL planned that subquery (under the documents' policy) and ran it as a hashed
-- SubPlan reading every readable document of every base, at each reference to the table in a
-- statement. Version 2 compares the row's own readers (sql/access/row_readers.v1.sql: the
-- document's, kept equal by triggers) with the principals, as the documents' policy does: a
-- comparison of two short arrays per row, the principals read once per statement (an InitPlan).
-- Its functions are PARALLEL SAFE (sql/access/functions.v1.sql): the dense scan stays parallel.
ALTER TABLE documents ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS documents_search ON documents;
CREATE POLICY documents_search ON documents FOR SELECT TO metis_search
    USING (readers = '{}' OR readers && (SELECT metis_principals()));
DROP POLICY IF EXISTS documents_views ON documents;
CREATE POLICY documents_views ON documents FOR SELECT TO metis_views
    USING (readers = '{}' OR readers && (SELECT metis_viewer_groups()));

ALTER TABLE chunks ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS chunks_readable ON chunks;
CREATE POLICY chunks_search ON chunks FOR SELECT TO metis_search
    USING (readers = '{}' OR readers && (SELECT metis_principals()));
CREATE POLICY chunks_views ON chunks FOR SELECT TO metis_views
    USING (readers = '{}' OR readers && (SELECT metis_viewer_groups()));

ALTER TABLE embeddings ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS embeddings_readable ON embeddings;
CREATE POLICY embeddings_search ON embeddings FOR SELECT TO metis_search
    USING (readers = '{}' OR readers && (SELECT metis_principals()));
CREATE POLICY embeddings_views ON embeddings FOR SELECT TO metis_views
    USING (readers = '{}' OR readers && (SELECT metis_viewer_groups()));

ALTER TABLE facts ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS facts_readable ON facts;
CREATE POLICY facts_search ON facts FOR SELECT TO metis_search
    USING (readers = '{}' OR readers && (SELECT metis_principals()));
CREATE POLICY facts_views ON facts FOR SELECT TO metis_views
    USING (readers = '{}' OR readers && (SELECT metis_viewer_groups()));

ALTER TABLE posting_blocks ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS posting_blocks_search ON posting_blocks;
CREATE POLICY posting_blocks_search ON posting_blocks FOR SELECT TO metis_search USING (true);
DROP POLICY IF EXISTS posting_blocks_views ON posting_blocks;
CREATE POLICY posting_blocks_views ON posting_blocks FOR SELECT TO metis_views
    USING (NOT EXISTS (SELECT 1 FROM sources AS s WHERE s.base_id = posting_blocks.base_id
                       AND (s.readers <> '{}' OR s.front_matter_readers)));

ALTER TABLE block_lengths ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS block_lengths_search ON block_lengths;
CREATE POLICY block_lengths_search ON block_lengths FOR SELECT TO metis_search USING (true);
DROP POLICY IF EXISTS block_lengths_views ON block_lengths;
CREATE POLICY block_lengths_views ON block_lengths FOR SELECT TO metis_views
    USING (NOT EXISTS (SELECT 1 FROM sources AS s WHERE s.base_id = block_lengths.base_id
                       AND (s.readers <> '{}' OR s.front_matter_readers)));

ALTER TABLE bm25_terms ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS bm25_terms_search ON bm25_terms;
CREATE POLICY bm25_terms_search ON bm25_terms FOR SELECT TO metis_search USING (true);
DROP POLICY IF EXISTS bm25_terms_views ON bm25_terms;
CREATE POLICY bm25_terms_views ON bm25_terms FOR SELECT TO metis_views
    USING (NOT EXISTS (SELECT 1 FROM sources AS s WHERE s.base_id = bm25_terms.base_id
                       AND (s.readers <> '{}' OR s.front_matter_readers)));
