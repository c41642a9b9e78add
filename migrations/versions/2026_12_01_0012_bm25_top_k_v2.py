"""bm25_top_k v2: the keyword leg's function without the per-term max_score nothing read

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01

``sql/search/bm25_top_k.v1.sql`` (migration 0011) was edited in place after its release to drop
an unused column (commit 422d1a3): a database migrated before that edit runs the old body,
one migrated after it the new one, under the same revision. v1 is its released text again,
and this migration installs the edit as ``bm25_top_k.v2.sql`` on every database, whichever
v1 it had. The function's arguments and results are unchanged.
"""

from collections.abc import Sequence

from alembic import op

from metis_pg import sqlfiles

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(sqlfiles.load("search/bm25_top_k.v2"))


def downgrade() -> None:
    op.execute(sqlfiles.load("search/bm25_top_k.v1"))
