"""base_is_indexing(base_id, lock_space): whether a live indexer holds a base

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30

An indexer holds a session-level advisory lock on key (lock_space, base_id)
while it runs (``metis_pg.storage.indexer_session``); a killed process loses it
with its connection. ``sql/bases/list.sql`` and ``sql/bases/health.sql`` both
read that lock to show a base as ``indexing``: this function is the one place
that knows how a lock looks in ``pg_locks`` (two int4 keys: ``classid`` and
``objid``, ``objsubid = 2``).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION base_is_indexing(base_id integer, lock_space integer) RETURNS boolean
        LANGUAGE sql STABLE AS $$
            SELECT EXISTS (
                SELECT 1 FROM pg_locks AS l
                WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND l.classid = lock_space::oid AND l.objid = base_id::oid
            )
        $$
        """
    )
    op.execute(
        "COMMENT ON FUNCTION base_is_indexing(integer, integer) IS"
        " 'Whether a live indexer holds the advisory lock (lock_space, base_id) of a base.'"
    )


def downgrade() -> None:
    op.execute("DROP FUNCTION base_is_indexing(integer, integer)")
