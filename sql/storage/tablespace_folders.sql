-- The folders of the server's tablespaces besides the data folder's own (pg_default, pg_global have
-- no location): a table or index moved there (ALTER TABLE ... SET TABLESPACE) grows on that
-- folder's disk, which the disk check (metis_pg.disk_space) then measures too.
-- Returns: folder.
SELECT DISTINCT pg_catalog.pg_tablespace_location(t.oid) AS folder
FROM pg_catalog.pg_tablespace AS t
WHERE pg_catalog.pg_tablespace_location(t.oid) <> ''
