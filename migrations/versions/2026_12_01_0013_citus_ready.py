"""Citus-ready: no ON DELETE SET NULL on facts, chunks_without_vector joined on base_id

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01

Found by running metis on Citus 14.0 (docs/scaling.md, issue 22):

- ``facts_superseded_by_fkey`` was ``ON DELETE SET NULL``; Citus refuses SET NULL (and SET
  DEFAULT) on a foreign key that holds the distribution column (``sql/citus/keys.sql`` makes it
  ``(base_id, superseded_by)``). It becomes a plain foreign key (NO ACTION) in both shapes of
  the schema. Nothing deletes a fact alone: a fact that replaced another goes with its base,
  in the statement that deletes the one it replaced too, so no check ever fails.
- ``chunks_without_vector(base_id, model)`` matched a chunk's vectors by ``chunk_id`` alone: a
  correlated subquery between two distributed tables not joined on their distribution column,
  which Citus refuses ("complex joins are only supported when all distributed tables are
  co-located and joined on their distribution columns"). It now joins on ``base_id`` too (the
  key of ``embeddings`` starts with it in the Citus shape; on one node the old plan stays).
- ``bm25_top_k`` v3 (``sql/search/bm25_top_k.v3.sql``, from v2 of migration 0012): every read of a distributed table in
  its statement filtered by ``base_id = ANY(p_base_ids)`` itself, so that Citus routes one
  base's call to the worker holding it. Downgrade loads v2 again.
- Views ``metis.chunk_citations_v3``, ``metis.base_health_v3``, ``metis.postings_v2``: the
  columns and rows of the versions before them (their column comments copied), each join
  between distributed tables on ``base_id`` too. Citus refuses the versions before them.
"""

from collections.abc import Sequence

from alembic import op
from psycopg import sql

from metis_pg import sqlfiles

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Re-create facts_superseded_by_fkey on the same columns (one node: superseded_by; keyed by
#: sql/citus/keys.sql: base_id, superseded_by), with the ON DELETE action given.
_REKEY_SUPERSEDED = """
DO $fk$
DECLARE
    columns text;
    target text;
BEGIN
    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.ord),
           string_agg(quote_ident(fa.attname), ', ' ORDER BY k.ord)
    INTO columns, target
    FROM pg_constraint AS c
    CROSS JOIN LATERAL unnest(c.conkey, c.confkey) WITH ORDINALITY AS k (attnum, fattnum, ord)
    JOIN pg_attribute AS a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
    JOIN pg_attribute AS fa ON fa.attrelid = c.confrelid AND fa.attnum = k.fattnum
    WHERE c.conname = 'facts_superseded_by_fkey' AND c.conrelid = 'facts'::regclass;
    EXECUTE 'ALTER TABLE facts DROP CONSTRAINT facts_superseded_by_fkey';
    EXECUTE format('ALTER TABLE facts ADD CONSTRAINT facts_superseded_by_fkey FOREIGN KEY (%s)'
                   ' REFERENCES documents (%s) %s', columns, target, '{action}');
END
$fk$
"""

_CHUNKS_WITHOUT_VECTOR = """
CREATE OR REPLACE FUNCTION chunks_without_vector(base_id integer, model text) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT count(*)
    FROM chunks AS c
    WHERE c.base_id = chunks_without_vector.base_id
      AND NOT EXISTS (SELECT 1 FROM embeddings AS e
                      WHERE {join} AND e.model = chunks_without_vector.model)
$$
"""


#: New view -> (its released SQL, the view whose columns and comments it keeps, its comment).
VIEWS = {
    "chunk_citations_v3": (sqlfiles.load("views/chunk_citations.v3"), "chunk_citations_v2",
                           "Every chunk with its citation and the range it spans (SPEC F4, F13); version 3 of"
                           " chunk_citations (runs on Citus)."),
    "base_health_v3": (sqlfiles.load("views/base_health.v3"), "base_health_v2",
                       "One row per base: live status and what is indexed (SPEC F3, F14); version 3 of base_health"
                       " (runs on Citus)."),
    "postings_v2": (sqlfiles.load("views/postings.v2"), "postings",
                    "The BM25 postings of every base, one row per (term, chunk) (SPEC F6); version 2 of postings"
                    " (runs on Citus)."),
}


def _create_views() -> None:
    bind = op.get_bind()
    for view, (body, previous, comment) in VIEWS.items():
        name = sql.Identifier("metis", view)
        op.execute(sql.SQL("CREATE VIEW {} AS\n{}").format(name, sql.SQL(body)).as_string())
        op.execute(sql.SQL("COMMENT ON VIEW {} IS {}").format(name, sql.Literal(comment)).as_string())
        columns = bind.exec_driver_sql(
            "SELECT attname, col_description(attrelid, attnum) FROM pg_attribute"
            f" WHERE attrelid = 'metis.{previous}'::regclass AND attnum > 0 AND NOT attisdropped").fetchall()
        for column, text in columns:
            op.execute(sql.SQL("COMMENT ON COLUMN {}.{} IS {}").format(
                name, sql.Identifier(column), sql.Literal(text)).as_string())
        op.execute(sql.SQL("GRANT SELECT ON {} TO metis_analyst").format(name).as_string())


def upgrade() -> None:
    op.execute(_REKEY_SUPERSEDED.replace("{action}", ""))
    op.execute(_CHUNKS_WITHOUT_VECTOR.replace("{join}", "e.base_id = c.base_id AND e.chunk_id = c.chunk_id"))
    op.execute(sqlfiles.load("search/bm25_top_k.v3"))
    _create_views()


def downgrade() -> None:
    for view in VIEWS:
        op.execute(f"DROP VIEW IF EXISTS metis.{view}")
    op.execute(sqlfiles.load("search/bm25_top_k.v2"))
    op.execute(_CHUNKS_WITHOUT_VECTOR.replace("{join}", "e.chunk_id = c.chunk_id"))
    # On one node only: SET NULL of a composite key would set base_id NULL too.
    op.execute(_REKEY_SUPERSEDED.replace("{action}", "ON DELETE SET NULL"))
