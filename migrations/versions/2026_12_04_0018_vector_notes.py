"""vector_notes: why a chunk has no vector (or one made from a cut text), per chunk and model

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04

A chunk can lack a vector of its base's model for several reasons, and a later ``metis index``
must treat them apart (issue 26): one the embedding service refuses (an HTTP 4xx: bisected down
to that one text and skipped) would be refused again, while one left by a model that did not
answer must be tried again. One row per chunk and model fingerprint says which:

- ``refused``: the service refused the text; ``detail`` is its answer (status and length, never
  its body), ``max_chars`` the ``METIS_EMBED_MAX_CHARS`` it was cut to. Not sent again while the
  model (fingerprint) and that setting stay the same (``sql/storage/chunks_without_vector.sql``).
- ``model_unavailable``: the model did not answer when the chunk's turn came (or before); the
  next run tries again.
- ``cut``: the chunk HAS a vector, made from the first ``max_chars`` characters of its
  embedding text (the rest was cut).

A chunk without a vector and without a row has simply not been embedded yet. A row goes with its
chunk (foreign key, ON DELETE CASCADE); writing a chunk's vector deletes its ``refused`` /
``model_unavailable`` row. ``metis status``, ``GET /bases/{name}/status``, the console and MCP
``status`` count the rows by reason (``sql/bases/vector_notes.sql``).

On a database whose chunks ``sql/citus/keys.sql`` re-keyed already, the foreign key is
``(base_id, chunk_id)``; on Citus run ``sql/citus/distribute.sql`` again after this revision
to distribute the new table (it is idempotent).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE vector_notes (
            base_id    integer NOT NULL,
            chunk_id   bigint NOT NULL,
            model      text NOT NULL,
            reason     text NOT NULL CHECK (reason IN ('refused', 'model_unavailable', 'cut')),
            detail     text NOT NULL DEFAULT '',
            max_chars  integer,
            noted_at   timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT pk_vector_notes PRIMARY KEY (base_id, chunk_id, model)
        )
        """
    )
    # Chunks keyed by (base_id, chunk_id) already (sql/citus/keys.sql ran): the key Citus needs.
    keyed = op.get_bind().exec_driver_sql(
        "SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'pk_chunks' AND conrelid = 'chunks'::regclass)"
    ).scalar()
    if keyed:
        op.execute("ALTER TABLE vector_notes ADD CONSTRAINT vector_notes_chunk_fkey FOREIGN KEY (base_id, chunk_id)"
                   " REFERENCES chunks (base_id, chunk_id) ON DELETE CASCADE")
    else:
        op.execute("ALTER TABLE vector_notes ADD CONSTRAINT vector_notes_chunk_id_fkey FOREIGN KEY (chunk_id)"
                   " REFERENCES chunks ON DELETE CASCADE")
    # The cascade from chunks looks rows up by chunk_id.
    op.execute("CREATE INDEX ix_vector_notes_chunk ON vector_notes (chunk_id)")
    op.execute("COMMENT ON TABLE vector_notes IS 'Why a chunk has no vector of a model (refused, model_unavailable),"
               " or has one of a cut text (cut); none: not embedded yet (migration 0018)'")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS vector_notes")
