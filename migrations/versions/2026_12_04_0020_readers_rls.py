"""documents' readers and row-level security: sources.readers, documents.readers, the role metis_search,
policies for metis_search and metis_analyst, the analysts' views read with the analyst's rights

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-04

Issue 21, part 2 (docs/security.md):

- ``sources.readers text[]`` (groups given with ``metis index DIR --readers hr,legal``; ``'{}'`` =
  every caller) and ``sources.front_matter_readers`` (the operator lets the documents' own
  ``readers:`` narrow the source's); ``documents.readers``, given by the trigger
  ``documents_readers`` on every document written (``sql/access/functions.v1.sql``).
- Roles ``metis_search`` and ``metis_views`` (NOLOGIN, not BYPASSRLS), created when missing.
  Every read on behalf of principals runs ``SET LOCAL ROLE metis_search`` with ``SET LOCAL
  metis.principals`` (:mod:`metis_pg.access`); the migrating role is granted both when it is not
  a superuser (a superuser may SET ROLE to any role).
- Row-level security (``sql/access/policies.v1.sql``) on documents, chunks, embeddings, facts,
  posting_blocks, block_lengths and bm25_terms, for ``metis_search`` and ``metis_views``. The
  owner (who migrates and indexes) is not subject to it: no FORCE ROW LEVEL SECURITY.
- The analysts' views read their tables with their owner's rights (migration 0003), and the
  owner bypasses row-level security: every view of schema ``metis`` now belongs to
  ``metis_views`` (their text and columns unchanged), which has SELECT on the tables and reads
  them under the policies for the groups of the role reading the view: the roles
  ``metis_reader_<group>`` it is a member of. Analysts still have no grant on any table. A view
  added by a later migration must be given to ``metis_views`` too (tests/test_access.py checks).

Downgrade drops the policies, the trigger, the functions, the columns and the grants, sets the
views back to their owner's rights, and keeps the role (cluster-wide, as metis_analyst).
"""

from collections.abc import Sequence

from alembic import op

from metis_pg import sqlfiles

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Tables metis_search reads on behalf of principals (the search statement, get, ls, notes, facts).
SEARCH_TABLES = ("bases", "sources", "documents", "chunks", "embeddings", "facts", "posting_blocks",
                 "block_lengths", "bm25_terms", "bm25_totals", "search_counts")
#: Tables the analysts' views read, with their owner's (metis_views') rights.
VIEW_TABLES = ("bases", "sources", "documents", "chunks", "embeddings", "facts", "posting_blocks",
               "block_lengths", "bm25_terms", "search_counts")
RLS_TABLES = ("documents", "chunks", "embeddings", "facts", "posting_blocks", "block_lengths", "bm25_terms")

ROLES = ("metis_search", "metis_views")

#: Create a role when missing (two databases of one cluster may migrate at once) and let the
#: migrating role SET ROLE to it when it is not a superuser.
_ROLE = """
DO $body$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'ROLE_NAME') THEN
        BEGIN
            CREATE ROLE ROLE_NAME NOLOGIN NOSUPERUSER NOBYPASSRLS;
        EXCEPTION
            WHEN duplicate_object THEN NULL;
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION USING
                    ERRCODE = 'insufficient_privilege',
                    MESSAGE = 'the role ROLE_NAME does not exist and ' || current_user || ' may not create roles',
                    HINT = 'ask an administrator to run CREATE ROLE ROLE_NAME NOLOGIN and GRANT ROLE_NAME TO '
                           || current_user || ', then run metis db upgrade again';
        END;
    END IF;
    IF NOT (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user)
       AND NOT pg_catalog.pg_has_role(current_user, 'ROLE_NAME', 'MEMBER') THEN
        EXECUTE format('GRANT ROLE_NAME TO %I', current_user);
    END IF;
END
$body$
"""

_VIEWS = "SELECT format('%I.%I', schemaname, viewname) FROM pg_catalog.pg_views WHERE schemaname = 'metis'"


def upgrade() -> None:
    op.execute("ALTER TABLE sources ADD COLUMN readers text[] NOT NULL DEFAULT '{}',"
               " ADD COLUMN front_matter_readers boolean NOT NULL DEFAULT false")
    op.execute("ALTER TABLE documents ADD COLUMN readers text[] NOT NULL DEFAULT '{}'")
    op.execute("COMMENT ON COLUMN sources.readers IS 'groups that may read the documents of the source; "
               "empty = every caller (metis index --readers)'")
    op.execute("COMMENT ON COLUMN sources.front_matter_readers IS 'whether a document''s own readers metadata "
               "may narrow the source''s (metis index --front-matter-readers)'")
    op.execute("COMMENT ON COLUMN documents.readers IS 'groups that may read the document; empty = every caller; "
               "{!none} = the operator only'")
    op.execute(sqlfiles.load("access/functions.v1"))
    op.execute("CREATE INDEX ix_documents_restricted ON documents (base_id) WHERE readers <> '{}'")
    # A SECURITY DEFINER function resolves names in the schema it was created in, never in a caller's
    # temporary schema first; only metis_search (and the owner) may call it.
    op.execute("DO $body$ BEGIN EXECUTE format('ALTER FUNCTION metis_hidden_chunks(int[]) SET search_path = %I,"
               " pg_temp', current_schema()); END $body$")
    op.execute("REVOKE ALL ON FUNCTION metis_hidden_chunks(int[]) FROM PUBLIC")
    op.execute("CREATE TRIGGER documents_readers BEFORE INSERT ON documents"
               " FOR EACH ROW EXECUTE FUNCTION metis_documents_readers()")
    for role in ROLES:
        op.execute(_ROLE.replace("ROLE_NAME", role))
    op.execute(f"GRANT SELECT ON {', '.join(SEARCH_TABLES)} TO metis_search")
    op.execute("GRANT EXECUTE ON FUNCTION base_state(integer), metis_hidden_chunks(int[]) TO metis_search")
    op.execute(f"GRANT SELECT ON {', '.join(VIEW_TABLES)} TO metis_views")
    op.execute("GRANT EXECUTE ON FUNCTION base_state(integer) TO metis_views")
    op.execute("GRANT USAGE, CREATE ON SCHEMA metis TO metis_views")  # a view's new owner needs CREATE on it
    op.execute(sqlfiles.load("access/policies.v1"))
    op.execute(f"DO $body$ DECLARE v text; BEGIN FOR v IN {_VIEWS} LOOP"
               " EXECUTE format('ALTER VIEW %s OWNER TO metis_views', v); END LOOP; END $body$")


def downgrade() -> None:
    op.execute(f"DO $body$ DECLARE v text; BEGIN FOR v IN {_VIEWS} LOOP"
               " EXECUTE format('ALTER VIEW %s OWNER TO CURRENT_USER', v); END LOOP; END $body$")
    for table in RLS_TABLES:
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
        for policy in ("search", "views", "readable"):
            op.execute(f"DROP POLICY IF EXISTS {table}_{policy} ON {table}")
    op.execute("REVOKE ALL ON SCHEMA metis FROM metis_views")
    op.execute("REVOKE EXECUTE ON FUNCTION base_state(integer) FROM metis_views")
    op.execute(f"REVOKE SELECT ON {', '.join(VIEW_TABLES)} FROM metis_views")
    op.execute("REVOKE EXECUTE ON FUNCTION base_state(integer) FROM metis_search")
    op.execute("DROP INDEX IF EXISTS ix_documents_restricted")
    op.execute(f"REVOKE SELECT ON {', '.join(SEARCH_TABLES)} FROM metis_search")
    op.execute("DROP TRIGGER IF EXISTS documents_readers ON documents")
    for function in ("metis_hidden_chunks(int[])", "metis_documents_readers()", "metis_document_readers(text[], boolean, jsonb)",
                     "metis_viewer_groups()", "metis_principals()"):
        op.execute(f"DROP FUNCTION IF EXISTS {function}")
    op.execute("ALTER TABLE documents DROP COLUMN readers")
    op.execute("ALTER TABLE sources DROP COLUMN front_matter_readers, DROP COLUMN readers")
