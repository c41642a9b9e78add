-- Citus, step 3b of 3 (after keys.sql): distribute the tables by base_id.
--
-- Reference tables (a full copy on every node; few rows, joined by every search):
--   bases, sources
-- Distributed by base_id, all co-located with documents (one base's rows of every table in
-- shards of the same number, on the same worker):
--   documents, chunks, embeddings, posting_blocks, block_lengths, bm25_terms, bm25_totals, facts,
--   search_counts, vector_notes
-- Local to the coordinator: alembic_version (the migrations' bookkeeping), analyst_limits (read by
-- the login trigger of the coordinator, migration 0014).
--
-- A table a later migration adds stays a local table on the coordinator until it is listed here
-- (the posting blocks of migration 0011 are).
--
-- Run with psql -v ON_ERROR_STOP=1 on the coordinator; each call runs in its own transaction
-- (\gexec). Idempotent: a table distributed already is skipped.
SET citus.multi_shard_modify_mode TO 'sequential';
-- Without this, making bases a reference table first turns every table with a foreign key to it
-- into a Citus local table (partmethod 'n', colocation 0), which cannot then be distributed.
SET citus.enable_local_reference_table_foreign_keys TO off;
-- documents has a trigger (documents_readers, migration 0020: a document's readers from its
-- source's, a reference table present on every node): Citus distributes a table with triggers only
-- when told to, and then runs them on the shards, on the workers.
SET citus.enable_unsafe_triggers TO on;
-- Row-level security by readers (migration 0020, sql/access/policies.v1.sql) cannot exist on
-- distributed tables: Citus refuses subqueries in their policies ("Subqueries are not supported in
-- policies on distributed tables"), and every policy there has one. On Citus the policies are
-- dropped and row-level security is off; metis then refuses every read on behalf of principals
-- (metis_pg.access: DATABASE_UNSUPPORTED) rather than answer it unfiltered (docs/scaling.md).
SELECT format('DROP POLICY IF EXISTS %I ON %I', p.policyname, p.tablename)
FROM pg_catalog.pg_policies AS p
WHERE p.schemaname = current_schema()
  AND p.tablename IN ('documents', 'chunks', 'embeddings', 'facts', 'posting_blocks', 'block_lengths', 'bm25_terms',
                      'vector_notes')
ORDER BY p.tablename, p.policyname
\gexec

-- The triggers that keep chunks', vectors' and facts' readers equal to their document's (migration
-- 0024, sql/access/row_readers.v1.sql) serve only those policies, and each would read documents, a
-- distributed table, from a shard of another ("distributed query from a query on a shard"):
-- dropped with them. (Migration 0024 creates none where the documents are distributed already.)
SELECT format('DROP TRIGGER IF EXISTS %I ON %I', t.tgname, c.relname)
FROM pg_catalog.pg_trigger AS t
JOIN pg_catalog.pg_class AS c ON c.oid = t.tgrelid
WHERE c.relnamespace = current_schema()::regnamespace AND NOT t.tgisinternal
  AND t.tgname IN ('chunks_readers', 'embeddings_readers', 'facts_readers', 'documents_readers_changed')
ORDER BY c.relname, t.tgname
\gexec

SELECT format('ALTER TABLE %I DISABLE ROW LEVEL SECURITY', c.relname)
FROM pg_catalog.pg_class AS c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND c.relrowsecurity
ORDER BY c.relname
\gexec

SELECT format('SELECT create_reference_table(%L)', t)
FROM unnest(ARRAY['bases', 'sources']) WITH ORDINALITY AS x (t, n)
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = t::regclass)
ORDER BY n
\gexec

SELECT format('SELECT create_distributed_table(%L, %L%s)', t, 'base_id',
              CASE WHEN t = 'documents' THEN '' ELSE ', colocate_with => ''documents''' END)
FROM unnest(ARRAY['documents', 'chunks', 'embeddings', 'posting_blocks', 'block_lengths', 'bm25_terms',
                  'bm25_totals', 'facts', 'search_counts', 'vector_notes']) WITH ORDINALITY AS x (t, n)
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = t::regclass)
ORDER BY n
\gexec

-- The keyword leg's function plans its statement once per session on one node (a generic plan);
-- Citus cannot plan that statement with parameters ("could not create distributed plan"): on
-- Citus it is planned for each call, with its values, which makes one base's call a router query.
ALTER FUNCTION bm25_top_k(int[], text[], float8[], float8, float8, int, bigint[])
    SET plan_cache_mode = force_custom_plan;

SELECT logicalrelid::text AS table_name,
       CASE partmethod WHEN 'n' THEN 'reference' ELSE 'distributed by base_id' END AS how,
       colocationid
FROM pg_dist_partition ORDER BY 2, 1;
