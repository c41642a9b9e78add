-- Raise this transaction's statement_timeout by %(ms_per_chunk)s milliseconds per chunk written
-- (a large document's write is work, not a hung statement); 0 (no limit) stays 0.
-- Parameters: %(chunks)s bigint (chunks written and replaced), %(ms_per_chunk)s bigint.
SELECT set_config(
    'statement_timeout',
    CASE WHEN current_setting('statement_timeout') = '0' THEN '0'
         ELSE (round(extract(epoch FROM current_setting('statement_timeout')::interval) * 1000)
               + %(chunks)s::bigint * %(ms_per_chunk)s::bigint)::bigint::text
    END,
    true)
