"""chunks.col: the column where a chunk starts, when an earlier chunk holds text of its line

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-05

A Markdown or text file of one line longer than a chunk (a 90 KB line is 76 chunks) gave chunks
that all start on line 1: each was cited ``document:1``, and ``metis get document:1`` gave the last.
``chunks.col`` (integer) is the 1-based column (characters) of the chunk's first character in its
line when an earlier chunk of the document holds text of that line (md and txt, whose lines are
exact), NULL otherwise: such a chunk is cited ``document:line:column`` (metis_pg.chunking.Chunk.column).
Filled as documents are indexed; the column is added without a rewrite (no default), and a chunk
written before reads NULL (cited as it was).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE chunks ADD COLUMN col integer")
    op.execute("COMMENT ON COLUMN chunks.col IS "
               "'1-based column of the chunk''s first character in its line when an earlier chunk of the document"
               " holds text of that line (md, txt), else NULL'")


def downgrade() -> None:
    op.execute("ALTER TABLE chunks DROP COLUMN col")
