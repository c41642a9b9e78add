"""keyword leg v4: phrase and exclusion filters, and the exact BM25 of given chunks

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01

Issue 20. ``sql/search/bm25_top_k.v4.sql`` creates

- ``bm25_top_k(..., p_documents, p_only_chunks, p_drop_chunks)``: v3's exact top-k BM25 with
  two more filters: only the chunks holding the question's quoted phrases, never the chunks
  holding an excluded word (``"reset the router" -legacy``); both remove chunks before anything
  is ranked, so the pruning bounds still hold;
- ``bm25_chunk_scores``: the exact BM25 of given chunks, so that every candidate either leg
  found has both its cosine and its BM25 (complete scores, fused by score-based functions).

The 7-argument v3 function stays (an overload): nothing is rewritten, no table changes.
"""

from collections.abc import Sequence

from alembic import op

from metis_pg import sqlfiles

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(sqlfiles.load("search/bm25_top_k.v4"))


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS bm25_chunk_scores(int[], text[], float8[], float8, float8, bigint[])")
    op.execute("DROP FUNCTION IF EXISTS "
               "bm25_top_k(int[], text[], float8[], float8, float8, int, bigint[], bigint[], bigint[])")
