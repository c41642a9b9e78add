"""facts of memory bases: key, observed time, and which newer fact replaced it

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29

A fact is a document of a memory base (SPEC F11) with one row here. A newer
fact with the same key (or naming it) replaces it: the old row keeps its text
and gets ``superseded_by`` / ``superseded_at``. At most one fact per key holds.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE facts (
            document_id    bigint PRIMARY KEY REFERENCES documents ON DELETE CASCADE,
            base_id        integer NOT NULL REFERENCES bases ON DELETE CASCADE,
            key            text,
            observed_at    timestamptz NOT NULL DEFAULT now(),
            superseded_by  bigint REFERENCES documents ON DELETE SET NULL,
            superseded_at  timestamptz
        )
        """
    )
    op.execute(
        "CREATE UNIQUE INDEX uq_facts_holding_key ON facts (base_id, key)"
        " WHERE key IS NOT NULL AND superseded_by IS NULL"
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS facts")
