"""base_state(base_id): the one rule for a base's status; view metis.base_health_v2; advisory locks revoked

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

Issue 13, items 9 and 10:

- ``base_state(base_id)`` returns ``(status, interrupted)``: ``indexing`` only
  while a live indexer holds the base's session-level advisory lock (key
  ``(28009, base_id)``, ``storage.INDEXER_LOCK_SPACE``, read by
  ``base_is_indexing``); a row left at ``indexing`` by a killed indexer shows
  ``waiting`` (chunks lack a vector) or ``ready``, with ``interrupted``. Every
  reader uses it: ``sql/bases/list.sql`` (``metis status``, ``Metis.base``),
  ``sql/bases/health.sql`` (search warnings) and the view below. It is SECURITY
  DEFINER (the analyst, who may read no table, calls it through the view) with a
  fixed search_path, and only its owner and ``metis_analyst`` may execute it.
- View ``metis.base_health_v2`` (``sql/views/base_health.v2.sql``): version 1's
  columns with the live status and ``interrupted``. ``metis.base_health`` (v1,
  released) is kept unchanged: it shows the stored status.
- The advisory-lock functions that TAKE a lock (``pg_advisory_lock``,
  ``pg_advisory_xact_lock``, their ``_shared`` and ``pg_try_`` forms, both
  signatures) are revoked from PUBLIC in this database and granted to the role
  that owns the tables (the one migrating): ``metis_analyst`` can no longer hold
  the keys writers wait for. Only a superuser may change the privileges of
  ``pg_catalog`` functions: migrated by another role, this step is skipped with a
  NOTICE, and the residual risk is what docs/sql-views.md describes. Unlock
  functions stay public (they release only the caller's own locks).
"""

from collections.abc import Sequence

from alembic import op
from psycopg import sql

from metis_pg import sqlfiles

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Must equal metis_pg.storage.INDEXER_LOCK_SPACE (0x6D69); tests/test_database_faults.py checks it.
INDEXER_LOCK_SPACE = 28009

#: The functions that take an advisory lock, with both their signatures.
LOCKING_FUNCTIONS = [
    f"pg_catalog.{name}({args})"
    for name in ("pg_advisory_lock", "pg_advisory_lock_shared", "pg_advisory_xact_lock",
                 "pg_advisory_xact_lock_shared", "pg_try_advisory_lock", "pg_try_advisory_lock_shared",
                 "pg_try_advisory_xact_lock", "pg_try_advisory_xact_lock_shared")
    for args in ("bigint", "integer, integer")
]

V2_COLUMNS = {
    "base": "Name of the base.",
    "kind": "documents, or memory (a base of facts).",
    "status": "Live status: indexing (an indexer runs now), waiting (chunks wait for a vector: the embedding model"
              " did not answer, or an indexer stopped before embedding them), or ready. From base_state().",
    "interrupted": "True when the last indexing run was killed before it finished (the next `metis index` finishes"
                   " it).",
    "documents": "Documents indexed.",
    "chunks": "Chunks indexed.",
    "chunks_without_vector": "Chunks with no vector of the base's embedding model yet (found by keywords only).",
    "embedding_model": "Embedding fingerprint of the base: model name and dimension, as in embeddings.model.",
    "last_indexed_at": "When an indexing run of the base last finished; NULL if never.",
}


def _execute(statement: sql.Composable) -> None:
    op.execute(statement.as_string())


def _is_superuser() -> bool:
    return bool(op.get_bind().exec_driver_sql(
        "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user").scalar())


def upgrade() -> None:
    op.execute(
        f"""
        CREATE FUNCTION base_state(base_id integer, OUT status text, OUT interrupted boolean)
        LANGUAGE sql STABLE SECURITY DEFINER AS $$
            SELECT CASE WHEN live.indexing THEN 'indexing'
                        WHEN b.status = 'indexing' THEN
                             CASE WHEN chunks_without_vector(
                                           b.base_id,
                                           (b.spec ->> 'embedding_model') || ':' || (b.spec ->> 'embedding_dim')) > 0
                                  THEN 'waiting' ELSE 'ready' END
                        ELSE b.status
                   END,
                   b.status = 'indexing' AND NOT live.indexing
            FROM bases AS b
            CROSS JOIN LATERAL (SELECT base_is_indexing(b.base_id, {INDEXER_LOCK_SPACE}) AS indexing) AS live
            WHERE b.base_id = base_state.base_id
        $$
        """
    )
    # A SECURITY DEFINER function resolves names in the schema it was created in, never in
    # a caller's temporary schema first.
    op.execute(
        "DO $body$ BEGIN EXECUTE format('ALTER FUNCTION base_state(integer) SET search_path = %I, pg_temp',"
        " current_schema()); END $body$"
    )
    op.execute(
        "COMMENT ON FUNCTION base_state(integer) IS 'Status of a base (ready, indexing, waiting) and whether its"
        " last indexing was interrupted: the one rule every reader uses (migration 0008).'"
    )
    op.execute("REVOKE ALL ON FUNCTION base_state(integer) FROM PUBLIC")
    op.execute("GRANT EXECUTE ON FUNCTION base_state(integer) TO metis_analyst")

    body = sqlfiles.load("views/base_health.v2")
    view = sql.Identifier("metis", "base_health_v2")
    _execute(sql.SQL("CREATE VIEW {} AS\n{}").format(view, sql.SQL(body)))
    _execute(sql.SQL("COMMENT ON VIEW {} IS {}").format(view, sql.Literal(
        "One row per base: live status and what is indexed (SPEC F3, F14); version 2 of base_health.")))
    for column, text in V2_COLUMNS.items():
        _execute(sql.SQL("COMMENT ON COLUMN {}.{} IS {}").format(view, sql.Identifier(column), sql.Literal(text)))
    _execute(sql.SQL("GRANT SELECT ON {} TO metis_analyst").format(view))

    if _is_superuser():
        functions = ", ".join(LOCKING_FUNCTIONS)
        op.execute(f"REVOKE EXECUTE ON FUNCTION {functions} FROM PUBLIC")
        # The owner of the tables (the role migrating, which the application normally runs as).
        op.execute(f"GRANT EXECUTE ON FUNCTION {functions} TO CURRENT_USER")
    else:
        op.execute(
            "DO $body$ BEGIN RAISE NOTICE 'metis_pg 0008: % is not a superuser: the advisory-lock functions stay"
            " executable by PUBLIC (docs/sql-views.md, residual risks)', current_user; END $body$"
        )


def downgrade() -> None:
    if _is_superuser():  # PUBLIC may execute them again, as by default; the grant to the owner stays (harmless)
        op.execute(f"GRANT EXECUTE ON FUNCTION {', '.join(LOCKING_FUNCTIONS)} TO PUBLIC")
    op.execute("DROP VIEW IF EXISTS metis.base_health_v2")
    op.execute("DROP FUNCTION base_state(integer)")
