"""embeddings: an index by document, so a narrow filter reads only its documents' vectors

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30

With a filter (path prefix, kinds, sources) the dense leg scans the vectors of
the allowed documents only. Without this index it had to read every vector of
the base and drop the others: 51 ms at 100k chunks for a prefix keeping 1% of
the documents, about as long as no filter at all. The planner picks the index
when the filter keeps few documents and the sequential scan otherwise.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("CREATE INDEX ix_embeddings_document ON embeddings (document_id)")


def downgrade() -> None:
    op.execute("DROP INDEX ix_embeddings_document")
