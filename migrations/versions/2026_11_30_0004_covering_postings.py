"""postings: a covering primary key, so the keyword leg reads postings from the index alone

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

The keyword leg looks postings up by ``(base_id, term)`` and, when it prunes
common terms, by ``(base_id, term, chunk_id)``. Postings are written in chunk
order, so a term's rows lie on as many heap pages as it has rows: at 100k
chunks one query read 120,038 heap pages for 129,896 postings. With
``document_id, tf, chunk_terms`` included in the primary key's index, the scan
is index-only once the table is vacuumed (autovacuum does it after inserts):
that query's postings scan went from 1,375 ms to 62 ms, for 11% more space
(docs/performance.md).

The upgrade rebuilds the index and holds an exclusive lock on ``postings``
meanwhile: searches and indexing wait. Building both postings indexes for
the 100,000 chunks of `benchmarks/search_latency.py` took 35 s on 2 cores.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE postings DROP CONSTRAINT pk_postings")
    op.execute(
        "ALTER TABLE postings ADD CONSTRAINT pk_postings"
        " PRIMARY KEY (base_id, term, chunk_id) INCLUDE (document_id, tf, chunk_terms)"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE postings DROP CONSTRAINT pk_postings")
    op.execute("ALTER TABLE postings ADD CONSTRAINT pk_postings PRIMARY KEY (base_id, term, chunk_id)")
