"""sources.whole_folder: whether a source was ever indexed as a whole folder

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01

A single file is indexed into the source of its folder (``metis index notes/todo.md``
makes source ``notes``). Re-indexing a base with no path (``metis index --base B``)
read every source's whole folder again, so a folder of which one file was indexed
brought in all its other files. ``whole_folder`` tells the two apart: true once the
folder itself was indexed; a source of single files is re-read file by file.

Sources made before this revision are taken as whole folders (what re-indexing did
then), so nothing changes for them.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A constant default: PostgreSQL adds the column without rewriting the table.
    op.execute("ALTER TABLE sources ADD COLUMN whole_folder boolean NOT NULL DEFAULT true")
    op.execute("COMMENT ON COLUMN sources.whole_folder IS "
               "'true once the folder itself was indexed; false: only single files of it were (re-read one by one)'")


def downgrade() -> None:
    op.execute("ALTER TABLE sources DROP COLUMN whole_folder")
