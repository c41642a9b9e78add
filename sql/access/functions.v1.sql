-- Access control by readers (issue 21, part 2), version 1: the functions the row-level security
-- policies of sql/access/policies.v1.sql and the documents' readers trigger use. Created by
-- migration 0020; released files are never edited (a change is a v2 file and a migration).
--
-- A document's readers (documents.readers, text[]): the groups that may read it; '{}' = every
-- caller. '{!none}' = no group (only the operator): a front matter naming no group of its source.
-- Group names are lower case, 1-63 of [a-z0-9_.-] starting with a letter or digit ('!none' is not one).

-- The principals of the transaction: the groups a search, get, ls ... runs on behalf of, set by
-- metis_pg.access with SET LOCAL metis.principals = '{eng,hr}' together with SET LOCAL ROLE
-- metis_search. Unset or empty = no group (only documents without readers).
CREATE OR REPLACE FUNCTION metis_principals() RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE AS $function$
    SELECT coalesce(nullif(current_setting('metis.principals', true), ''), '{}')::text[]
$function$;

-- The groups of whoever reads the analysts' views (metis_analyst's members): the roles
-- metis_reader_<group> the current role is a member of (GRANT metis_reader_hr TO alice). The views
-- are owned by metis_views, whose policies use these; the GUC above is never read for them (an
-- analyst could set it).
CREATE OR REPLACE FUNCTION metis_viewer_groups() RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE AS $function$
    SELECT coalesce(array_agg(substr(r.rolname, 14) ORDER BY r.rolname), '{}')
    FROM pg_catalog.pg_roles AS r
    WHERE r.rolname LIKE 'metis\_reader\_%'
      AND pg_catalog.pg_has_role(current_user, r.oid, 'MEMBER')
$function$;

-- A document's readers from its source's and its own metadata: the source's readers, narrowed by
-- the document's own `readers` (front matter: a list, or a comma-separated text) when the source
-- allows it (sources.front_matter_readers). Narrowing only: the groups kept are those of the
-- source (all named ones when the source has no readers); none kept = '{!none}'.
CREATE OR REPLACE FUNCTION metis_document_readers(p_source_readers text[], p_allowed boolean, p_meta jsonb)
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $function$
    SELECT CASE
        WHEN NOT p_allowed OR p_meta IS NULL OR NOT (p_meta ? 'readers') THEN p_source_readers
        ELSE coalesce((
            SELECT array_agg(DISTINCT g.name ORDER BY g.name)
            FROM (
                SELECT lower(btrim(x.item)) AS name
                FROM jsonb_array_elements_text(CASE jsonb_typeof(p_meta -> 'readers')
                                                   WHEN 'array' THEN p_meta -> 'readers' ELSE '[]' END) AS x(item)
                UNION ALL
                SELECT lower(btrim(y.item))
                FROM unnest(string_to_array(CASE jsonb_typeof(p_meta -> 'readers')
                                                WHEN 'string' THEN p_meta ->> 'readers' END, ',')) AS y(item)
            ) AS g
            WHERE g.name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'
              AND (p_source_readers = '{}' OR g.name = ANY(p_source_readers))
        ), '{!none}')
    END
$function$;

-- The trigger giving every document written its readers (COPY and INSERT alike): the indexer never
-- has to, and a document can never be written readable by more than its source allows.
CREATE OR REPLACE FUNCTION metis_documents_readers() RETURNS trigger
LANGUAGE plpgsql AS $function$
BEGIN
    SELECT metis_document_readers(s.readers, s.front_matter_readers, NEW.meta) INTO NEW.readers
    FROM sources AS s WHERE s.source_id = NEW.source_id;
    NEW.readers := coalesce(NEW.readers, '{!none}');
    RETURN NEW;
END
$function$;

-- The chunks of the bases that the transaction's principals may not read (documents with readers
-- sharing no group with them): the ids only, for the keyword leg to drop (sql/search/hybrid.sql),
-- whose posting blocks are shared by the groups of a base. SECURITY DEFINER (it must see what the
-- caller may not), executable by metis_search only (migration 0020); reads the few documents with
-- readers through the partial index ix_documents_restricted, then their chunks by document.
CREATE OR REPLACE FUNCTION metis_hidden_chunks(p_base_ids int[]) RETURNS SETOF bigint
LANGUAGE sql STABLE SECURITY DEFINER AS $function$
    SELECT c.chunk_id
    FROM documents AS d
    -- One range of the chunks' (document_id, ordinal) key per hidden document (OFFSET 0 keeps the
    -- planner from turning it into a scan of every chunk when its estimate of them is off).
    CROSS JOIN LATERAL (SELECT c.chunk_id FROM chunks AS c WHERE c.document_id = d.document_id OFFSET 0) AS c
    WHERE d.base_id = ANY(p_base_ids) AND d.readers <> '{}'
      AND NOT d.readers && metis_principals()
$function$;
