"""chunks_without_vector(base_id, model): how many chunks of a base lack a vector of a model

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30

A chunk indexed while the embedding model did not answer has no vector yet
(SPEC F14). ``sql/bases/list.sql`` and ``sql/bases/health.sql`` show the count
of such chunks, and the indexer reads it to decide between ``waiting`` and
``ready``: this function is the one place that counts them.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION chunks_without_vector(base_id integer, model text) RETURNS bigint
        LANGUAGE sql STABLE AS $$
            SELECT count(*)
            FROM chunks AS c
            WHERE c.base_id = chunks_without_vector.base_id
              AND NOT EXISTS (SELECT 1 FROM embeddings AS e
                              WHERE e.chunk_id = c.chunk_id AND e.model = chunks_without_vector.model)
        $$
        """
    )
    op.execute(
        "COMMENT ON FUNCTION chunks_without_vector(integer, text) IS"
        " 'How many chunks of a base have no vector of the embedding model (fingerprint model:dim).'"
    )


def downgrade() -> None:
    op.execute("DROP FUNCTION chunks_without_vector(integer, text)")
