"""vector_notes read on behalf of principals: granted to metis_search, under row-level security

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-04

Issue 21, part 2: the Bases page of the console, ``GET /bases`` and MCP ``list_bases`` / ``status``
count, for a token with groups, only what its groups may read (they counted every document).
The counts run on behalf of the principals (``SET LOCAL ROLE metis_search``), and one of them
reads ``vector_notes`` (why a chunk has no vector, migration 0018), which metis_search could not
read. It may now, under a policy that keeps the notes of the chunks it may read (the chunks' own
policy applies inside it): a note of a hidden chunk is no count.

On Citus the documents are not under row-level security (``sql/citus/distribute.sql`` drops the
policies: Citus refuses subqueries in them) and every read on behalf of principals is refused:
there only the grant is given, and ``distribute.sql`` drops this policy too when it runs again.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Whether the documents are under row-level security (not on Citus once distributed).
_ENFORCED = "SELECT c.relrowsecurity FROM pg_catalog.pg_class AS c WHERE c.oid = to_regclass('documents')"


def upgrade() -> None:
    op.execute("GRANT SELECT ON vector_notes TO metis_search")
    if not op.get_bind().exec_driver_sql(_ENFORCED).scalar():
        return
    op.execute("ALTER TABLE vector_notes ENABLE ROW LEVEL SECURITY")
    op.execute("CREATE POLICY vector_notes_readable ON vector_notes FOR SELECT TO metis_search"
               " USING (EXISTS (SELECT 1 FROM chunks AS c WHERE c.chunk_id = vector_notes.chunk_id))")


def downgrade() -> None:
    op.execute("DROP POLICY IF EXISTS vector_notes_readable ON vector_notes")
    op.execute("ALTER TABLE vector_notes DISABLE ROW LEVEL SECURITY")
    op.execute("REVOKE SELECT ON vector_notes FROM metis_search")
