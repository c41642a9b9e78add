-- The size of this database on disk, in bytes (tables, indexes, TOAST; not the WAL): what
-- METIS_DATABASE_MAX_MB bounds on a server of your own.
-- Returns: bytes.
SELECT pg_database_size(current_database()) AS bytes
