-- Citus, step 3b of 3 (after keys.sql): distribute the tables by base_id.
--
-- Reference tables (a full copy on every node; few rows, joined by every search):
--   bases, sources
-- Distributed by base_id, all co-located with documents (one base's rows of every table in
-- shards of the same number, on the same worker):
--   documents, chunks, embeddings, posting_blocks, block_lengths, bm25_terms, bm25_totals, facts,
--   search_counts
-- Local to the coordinator: alembic_version (the migrations' bookkeeping), analyst_limits (read by
-- the login trigger of the coordinator, migration 0013).
--
-- A table a later migration adds stays a local table on the coordinator until it is listed here
-- (the posting blocks of migration 0011 are).
--
-- Run with psql -v ON_ERROR_STOP=1 on the coordinator; each call runs in its own transaction
-- (\gexec). Idempotent: a table distributed already is skipped.
SET citus.multi_shard_modify_mode TO 'sequential';

SELECT format('SELECT create_reference_table(%L)', t)
FROM unnest(ARRAY['bases', 'sources']) WITH ORDINALITY AS x (t, n)
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = t::regclass)
ORDER BY n
\gexec

SELECT format('SELECT create_distributed_table(%L, %L%s)', t, 'base_id',
              CASE WHEN t = 'documents' THEN '' ELSE ', colocate_with => ''documents''' END)
FROM unnest(ARRAY['documents', 'chunks', 'embeddings', 'posting_blocks', 'block_lengths', 'bm25_terms',
                  'bm25_totals', 'facts', 'search_counts']) WITH ORDINALITY AS x (t, n)
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = t::regclass)
ORDER BY n
\gexec

SELECT logicalrelid::text AS table_name,
       CASE partmethod WHEN 'n' THEN 'reference' ELSE 'distributed by base_id' END AS how,
       colocationid
FROM pg_dist_partition ORDER BY 2, 1;
