"""search counts per day, the metis schema of documented views, and the role metis_analyst

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29

SQL for analysts (SPEC F20):

- ``search_counts`` (base, UTC day, mode, searches): every search adds one for
  each of its bases (``sql/storage/count_search.sql``). Nothing of the question
  is stored.
- Schema ``metis`` with three views, their text read from the released files
  ``sql/views/<view>.v1.sql`` (never edited: a changed view is a ``.v2.sql`` file
  and a new revision restating it), each view and column commented.
- Group role ``metis_analyst`` (NOLOGIN), created when missing, with USAGE on
  schema ``metis`` and SELECT on the three views, nothing else. The views are
  owned by the role running this migration and are not ``security_invoker``, so
  they read the base tables with the owner's rights: the analyst needs no grant
  on any table. Give it to a login with ``GRANT metis_analyst TO alice``.

Roles belong to the whole PostgreSQL cluster, not to one database: downgrade
drops the schema, its views and ``search_counts`` (the grants go with them) but
KEEPS the role, which other databases of the cluster may use and logins may be
members of; drop it by hand (``DROP ROLE metis_analyst``) when nothing uses it.
"""

from collections.abc import Sequence

from alembic import op
from psycopg import sql

from metis_pg import sqlfiles

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ANALYST_ROLE = "metis_analyst"

#: view -> (comment on the view, {column: comment}); docs/sql-views.md says the same.
VIEWS: dict[str, tuple[str, dict[str, str]]] = {
    "chunk_citations": (
        "Every chunk of every base with its citation (SPEC F4, F13): where a search result comes from.",
        {
            "base": "Name of the base the chunk belongs to.",
            "source": "Name of the source (folder) the document was read from; a base's notes are metis-<base>.",
            "document": "Path of the document, relative to its source's folder.",
            "title": "Title of the document.",
            "kind": "Kind of the document: md, txt, html, pdf or docx.",
            "headings": "Heading path above the chunk, outermost first.",
            "page": "1-based PDF page of the chunk; NULL for other kinds.",
            "line": "1-based first line of the chunk in its file; NULL for PDF chunks.",
            "text": "The whole text of the chunk (at most the base's chunk_size characters).",
            "chunk_id": "Id of the chunk (the chunk_id of a search result).",
            "ordinal": "0-based position of the chunk in its document.",
        },
    ),
    "base_health": (
        "One row per base: status and what is indexed (SPEC F3, F14).",
        {
            "base": "Name of the base.",
            "kind": "documents, or memory (a base of facts).",
            "status": "ready, indexing, or waiting (indexing paused: the embedding model did not answer).",
            "documents": "Documents indexed.",
            "chunks": "Chunks indexed.",
            "chunks_without_vector": "Chunks with no vector of the base's embedding model yet (found by keywords only).",
            "embedding_model": "Embedding fingerprint of the base: model name and dimension, as in embeddings.model.",
            "last_indexed_at": "When an indexing run of the base last finished; NULL if never.",
        },
    ),
    "searches_per_day": (
        "Searches per base, day (UTC) and mode (SPEC F20). What was asked is never stored.",
        {
            "base": "Name of the base searched (a search of several bases counts once for each).",
            "day": "Day of the searches, in UTC.",
            "mode": "Search mode: hybrid, dense or keyword.",
            "searches": "Number of searches.",
        },
    ),
}


def _qualified(view: str) -> sql.Identifier:
    return sql.Identifier("metis", view)


def _execute(statement: sql.Composable) -> None:
    op.execute(statement.as_string())


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE search_counts (
            base_id   integer NOT NULL REFERENCES bases ON DELETE CASCADE,
            day       date NOT NULL,
            mode      text NOT NULL,
            searches  bigint NOT NULL DEFAULT 0,
            CONSTRAINT pk_search_counts PRIMARY KEY (base_id, day, mode),
            CONSTRAINT ck_search_counts_mode CHECK (mode IN ('hybrid', 'dense', 'keyword'))
        )
        """
    )
    op.execute("CREATE SCHEMA metis")
    op.execute("COMMENT ON SCHEMA metis IS 'metis_pg views for analysts (SPEC F20): read them as metis_analyst'")
    for view, (about, columns) in VIEWS.items():
        body = sqlfiles.load(f"views/{view}.v1")
        _execute(sql.SQL("CREATE VIEW {} AS\n{}").format(_qualified(view), sql.SQL(body)))
        _execute(sql.SQL("COMMENT ON VIEW {} IS {}").format(_qualified(view), sql.Literal(about)))
        for column, text in columns.items():
            _execute(
                sql.SQL("COMMENT ON COLUMN {}.{} IS {}").format(
                    _qualified(view), sql.Identifier(column), sql.Literal(text)
                )
            )
    # Create the group role when missing; two databases of one cluster may migrate at once.
    op.execute(
        """
        DO $body$
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'metis_analyst') THEN
                BEGIN
                    CREATE ROLE metis_analyst NOLOGIN;
                EXCEPTION
                    WHEN duplicate_object THEN NULL;
                    WHEN insufficient_privilege THEN
                        RAISE EXCEPTION USING
                            ERRCODE = 'insufficient_privilege',
                            MESSAGE = 'the role metis_analyst does not exist and ' || current_user
                                      || ' may not create roles',
                            HINT = 'ask an administrator to run CREATE ROLE metis_analyst NOLOGIN, '
                                   || 'then run metis db upgrade again';
                END;
            END IF;
        END
        $body$
        """
    )
    _execute(sql.SQL("GRANT USAGE ON SCHEMA metis TO {}").format(sql.Identifier(ANALYST_ROLE)))
    _execute(
        sql.SQL("GRANT SELECT ON {} TO {}").format(
            sql.SQL(", ").join(_qualified(v) for v in VIEWS), sql.Identifier(ANALYST_ROLE)
        )
    )


def downgrade() -> None:
    # The role stays (cluster-wide; see the module docstring); its grants go with the schema.
    op.execute("DROP SCHEMA IF EXISTS metis CASCADE")
    op.execute("DROP TABLE IF EXISTS search_counts")
