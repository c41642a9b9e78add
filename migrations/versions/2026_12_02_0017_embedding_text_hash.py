"""embeddings.text_hash: each distinct embedding text is embedded once per model

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-01

Chunks whose embedding text (title > headings + text, metis_pg.chunking.embedding_text) is
identical get the same vector from the same model. ``text_hash`` (the first 8 bytes of the
BLAKE2b digest of that text, as a signed bigint: metis_pg.storage.text_hash) lets the embedding
phase find a vector already stored for a text, in this run or an earlier one, instead of calling
the model again; the donor chunk's text is compared in full before its vector is reused, so a
hash collision costs one model call, never a wrong vector (metis_pg.indexing.vectors).

Vectors written before this revision have no hash (NULL): they are simply never reused. The
column is added without a rewrite (no default); the index is partial (hashed rows only) and
ends with the hash so ``metis status`` counts distinct texts with an index-only scan.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE embeddings ADD COLUMN text_hash bigint")
    op.execute("COMMENT ON COLUMN embeddings.text_hash IS "
               "'first 8 bytes of BLAKE2b of the embedding text (NULL: written before migration 0017)'")
    op.execute("CREATE INDEX ix_embeddings_text_hash ON embeddings (base_id, model, text_hash)"
               " WHERE text_hash IS NOT NULL")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS ix_embeddings_text_hash")
    op.execute("ALTER TABLE embeddings DROP COLUMN text_hash")
