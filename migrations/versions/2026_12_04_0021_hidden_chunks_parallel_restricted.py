"""metis_hidden_chunks is PARALLEL RESTRICTED: the search statement's dense scan runs in parallel again

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-04

Issue 24: migration 0020 created ``metis_hidden_chunks(int[])`` (sql/access/functions.v1.sql) without
a parallel label, so PostgreSQL took it as PARALLEL UNSAFE; sql/search/hybrid.sql calls it (its
``hidden`` CTE), and one parallel-unsafe function anywhere in a statement makes the planner plan the
whole statement without parallel workers. Every search since 0020 scanned the vectors in one process
(``EXPLAIN``: a ``Seq Scan on embeddings`` where there was a ``Gather Merge`` over a ``Parallel Seq
Scan``), for the operator as for principals. The function reads only (documents, chunks, a GUC) and
runs in the leader anyway (a materialized CTE): RESTRICTED is its true label (SECURITY DEFINER and
its SET search_path are allowed in the leader of a parallel plan). docs/performance.md has the
figures. A one-line ALTER, so the released functions.v1.sql stays as it is.

Downgrade: PARALLEL UNSAFE again (what 0020 left).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER FUNCTION metis_hidden_chunks(int[]) PARALLEL RESTRICTED")


def downgrade() -> None:
    op.execute("ALTER FUNCTION metis_hidden_chunks(int[]) PARALLEL UNSAFE")
