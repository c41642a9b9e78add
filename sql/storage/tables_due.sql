-- Which of metis's tables autovacuum's own rule says are due for ANALYZE or VACUUM now
-- (storage.maintenance.maintain runs them at the end of a run that wrote: a CLI command's
-- embedded server lives seconds, and autovacuum looks at a database once a minute).
-- The rule is autovacuum's (PostgreSQL 18, relation_needs_vacanalyze in autovacuum.c; the
-- documentation's "The Autovacuum Daemon"), each threshold from the table's own storage parameter
-- when it has one, else from the server's setting:
--   ANALYZE when n_mod_since_analyze > analyze_threshold + analyze_scale_factor * reltuples,
--     and also when the table was never analyzed nor vacuumed (reltuples -1): its rows are
--     planned on defaults (autovacuum takes reltuples -1 as 0, i.e. waits for 50 changes);
--   VACUUM when n_dead_tup > min(vacuum_threshold + vacuum_scale_factor * reltuples,
--     vacuum_max_threshold), or n_ins_since_vacuum > vacuum_insert_threshold +
--     vacuum_insert_scale_factor * reltuples (insert_threshold -1 turns that off; PostgreSQL 18
--     scales it by the part of the table not frozen: this takes the whole table, so it waits a
--     little longer on an old, frozen table).
-- reltuples below 0 counts as 0, as autovacuum counts it.
-- Only tables the role may VACUUM and ANALYZE are returned (MAINTAIN from PostgreSQL 17; the
-- owner's rights before), so a role that may not is skipped without a warning from the server.
-- Nothing on a Citus database: the coordinator's counters of a distributed table are those of its
-- empty shell; its shards live on the workers, long-running servers whose autovacuum keeps them
-- (and a VACUUM on the coordinator is sent to every placement: Citus docs, "Vacuuming Distributed
-- Tables").
-- Parameters: %(tables)s text[]: table names, resolved by the search path as metis's statements
-- resolve them (a name that is no table is ignored).
-- Returns: one row per table due: tablename (regclass text, quoted as needed), do_analyze,
-- do_vacuum (booleans), reltuples, n_mod_since_analyze, n_dead_tup, n_ins_since_vacuum.
WITH asked AS (
    SELECT DISTINCT to_regclass(t) AS relid
    FROM unnest(%(tables)s::text[]) AS t
),
counts AS (
    SELECT s.relid, greatest(c.reltuples, 0) AS tuples, c.reltuples, s.n_mod_since_analyze, s.n_dead_tup,
           s.n_ins_since_vacuum, c.relowner, c.reloptions
    FROM asked
    JOIN pg_stat_user_tables AS s ON s.relid = asked.relid
    JOIN pg_class AS c ON c.oid = s.relid
    WHERE NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')
      AND CASE WHEN current_setting('server_version_num')::int >= 170000
               THEN has_table_privilege(s.relid, 'MAINTAIN')
               ELSE pg_has_role(c.relowner, 'USAGE') END
),
rule AS (
    SELECT counts.*,
           coalesce(o.analyze_threshold, current_setting('autovacuum_analyze_threshold')::float8) AS anl_base,
           coalesce(o.analyze_scale, current_setting('autovacuum_analyze_scale_factor')::float8) AS anl_scale,
           coalesce(o.vacuum_threshold, current_setting('autovacuum_vacuum_threshold')::float8) AS vac_base,
           coalesce(o.vacuum_scale, current_setting('autovacuum_vacuum_scale_factor')::float8) AS vac_scale,
           coalesce(o.vacuum_max, current_setting('autovacuum_vacuum_max_threshold', true)::float8) AS vac_max,
           coalesce(o.insert_threshold, current_setting('autovacuum_vacuum_insert_threshold')::float8) AS ins_base,
           coalesce(o.insert_scale, current_setting('autovacuum_vacuum_insert_scale_factor')::float8) AS ins_scale
    FROM counts
    CROSS JOIN LATERAL (
        SELECT max(option_value) FILTER (WHERE option_name = 'autovacuum_analyze_threshold')::float8
                   AS analyze_threshold,
               max(option_value) FILTER (WHERE option_name = 'autovacuum_analyze_scale_factor')::float8
                   AS analyze_scale,
               max(option_value) FILTER (WHERE option_name = 'autovacuum_vacuum_threshold')::float8
                   AS vacuum_threshold,
               max(option_value) FILTER (WHERE option_name = 'autovacuum_vacuum_scale_factor')::float8
                   AS vacuum_scale,
               max(option_value) FILTER (WHERE option_name = 'autovacuum_vacuum_max_threshold')::float8
                   AS vacuum_max,
               max(option_value) FILTER (WHERE option_name = 'autovacuum_vacuum_insert_threshold')::float8
                   AS insert_threshold,
               max(option_value) FILTER (WHERE option_name = 'autovacuum_vacuum_insert_scale_factor')::float8
                   AS insert_scale
        FROM pg_options_to_table(counts.reloptions)
    ) AS o
),
due AS (
    SELECT relid, reltuples, n_mod_since_analyze, n_dead_tup, n_ins_since_vacuum,
           reltuples < 0 OR n_mod_since_analyze > anl_base + anl_scale * tuples AS do_analyze,
           n_dead_tup > least(vac_base + vac_scale * tuples, coalesce(nullif(vac_max, -1), 'infinity'))
           OR (ins_base >= 0 AND n_ins_since_vacuum > ins_base + ins_scale * tuples) AS do_vacuum
    FROM rule
)
SELECT relid::regclass::text AS tablename, do_analyze, do_vacuum, reltuples, n_mod_since_analyze, n_dead_tup,
       n_ins_since_vacuum
FROM due
WHERE do_analyze OR do_vacuum
ORDER BY tablename
