-- Citus, step 1 of 3 (docker/compose.citus.yaml, service citus-setup): make the cluster.
-- Run with psql on the coordinator, in the metis database. Idempotent: every start runs it.
-- The coordinator keeps the metadata and the reference tables' copy; the workers hold the shards.
-- The nodes' addresses are psql variables, by default those of the compose file (port 5432):
--   psql -v ON_ERROR_STOP=1 -f sql/citus/nodes.sql                      # compose: coordinator, worker1, worker2
--   psql -v coordinator=127.0.0.1 -v coordinator_port=9700 -v worker1=127.0.0.1 -v worker1_port=9701 \
--        -v worker2=127.0.0.1 -v worker2_port=9702 -f sql/citus/nodes.sql   # three servers on loopback
-- Each node's metis database must have the citus extension (the Citus image creates it; a server of
-- your own: CREATE EXTENSION citus on each, docs/scaling.md).
\if :{?coordinator} \else \set coordinator coordinator \endif
\if :{?coordinator_port} \else \set coordinator_port 5432 \endif
\if :{?worker1} \else \set worker1 worker1 \endif
\if :{?worker1_port} \else \set worker1_port 5432 \endif
\if :{?worker2} \else \set worker2 worker2 \endif
\if :{?worker2_port} \else \set worker2_port 5432 \endif
CREATE EXTENSION IF NOT EXISTS citus;
SELECT citus_set_coordinator_host(:'coordinator', :coordinator_port);
SELECT citus_add_node(:'worker1', :worker1_port);
SELECT citus_add_node(:'worker2', :worker2_port);
SELECT nodename, nodeport, noderole FROM pg_dist_node ORDER BY nodeid;
