-- Citus, step 1 of 3 (docker/compose.citus.yaml, service citus-setup): make the cluster.
-- Run with psql on the coordinator, in the metis database. Idempotent: every start runs it.
-- The coordinator keeps the metadata and the reference tables' copy; the workers hold the shards.
CREATE EXTENSION IF NOT EXISTS citus;
SELECT citus_set_coordinator_host('coordinator', 5432);
SELECT citus_add_node('worker1', 5432);
SELECT citus_add_node('worker2', 5432);
SELECT nodename, nodeport, noderole FROM pg_dist_node ORDER BY nodeid;
