"""chunks, embeddings and facts carry their document's readers; their policies compare that column

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-04

Issue 21, part 2 (the cost of reading on behalf of principals, docs/security.md): the policies of
migration 0020 on chunks, embeddings and facts were ``document_id IN (SELECT d.document_id FROM
documents AS d)``, which PostgreSQL plans, for each reference to one of these tables in a
statement, as a subquery over the documents (with their own policy) and runs as a hashed SubPlan
that reads every readable document of every base: six times in the search statement, for ten
rows in its final fetch. Now (``sql/access/row_readers.v1.sql``, ``sql/access/policies.v2.sql``):

- ``chunks.readers``, ``embeddings.readers``, ``facts.readers`` (text[], NOT NULL, default ``'{}'``):
  the document's readers, given by BEFORE INSERT (or UPDATE OF document_id) triggers from the
  document, and changed with the document's by an AFTER UPDATE OF readers trigger on documents;
  the rows already written are given theirs here (only those of documents with readers differ
  from the default);
- their policies: ``readers = '{}' OR readers && (SELECT metis_principals())`` for metis_search,
  ``... metis_viewer_groups()`` for metis_views: the documents' own condition, the same visibility
  (policies.v2 is the whole set of policies; the others are version 1's, dropped and created again).

On Citus the documents are not under row-level security (``sql/citus/distribute.sql`` drops the
policies) and reads on behalf of principals are refused: there only the columns are added.

Downgrade: version 1's policies again, the triggers, functions and columns dropped.
"""

from collections.abc import Sequence

from alembic import op

from metis_pg import sqlfiles

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("chunks", "embeddings", "facts")

#: Whether the documents are under row-level security (not on Citus once distributed).
_ENFORCED = "SELECT c.relrowsecurity FROM pg_catalog.pg_class AS c WHERE c.oid = to_regclass('documents')"


def upgrade() -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ADD COLUMN readers text[] NOT NULL DEFAULT '{{}}'")
        op.execute(f"COMMENT ON COLUMN {table}.readers IS 'its document''s readers (documents.readers), kept equal"
                   " by triggers; read by the row-level security policies'")
    if not op.get_bind().exec_driver_sql(_ENFORCED).scalar():
        return
    op.execute(sqlfiles.load("access/row_readers.v1"))
    op.execute(sqlfiles.load("access/policies.v2"))


def downgrade() -> None:
    for table in TABLES:
        op.execute(f"DROP POLICY IF EXISTS {table}_search ON {table}")
        op.execute(f"DROP POLICY IF EXISTS {table}_views ON {table}")
        op.execute(f"DROP TRIGGER IF EXISTS {table}_readers ON {table}")
    op.execute("DROP TRIGGER IF EXISTS documents_readers_changed ON documents")
    op.execute("DROP FUNCTION IF EXISTS metis_document_readers_changed()")
    op.execute("DROP FUNCTION IF EXISTS metis_row_readers()")
    if op.get_bind().exec_driver_sql(_ENFORCED).scalar():
        for table in TABLES:
            op.execute(f"CREATE POLICY {table}_readable ON {table} FOR SELECT TO metis_search, metis_views"
                       " USING (document_id IN (SELECT d.document_id FROM documents AS d))")
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} DROP COLUMN readers")
