"""documents' metadata (tags, author, category, date, modified_at, language, meta); bases' watch state;
views metis.documents and metis.chunk_citations_v4

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01

Issue 21:

- ``documents``: ``tags text[]`` (lower case, NOT NULL, ``'{}'`` when none), ``author``,
  ``category``, ``language`` (text), ``date`` (the document's own, timestamptz),
  ``modified_at`` (the file's modification time when it was read) and ``meta jsonb`` (every
  other key of its front matter / properties). Filled by the next ``metis index``: the readers'
  versions went up, so every file is read once more (vectors of unchanged chunk texts are kept).
  A GIN index on ``tags`` serves the tag filters of a search.
- ``bases.watched_at`` (a watcher's last sign of life) and ``bases.caught_up_at`` (when it last
  finished indexing what changed): ``metis status`` and the console's Bases page say a base is
  watched while ``watched_at`` is recent (metis_pg.watch).
- Views ``metis.documents`` (``sql/views/documents.v1.sql``) and ``metis.chunk_citations_v4``
  (``sql/views/chunk_citations.v4.sql``: version 3 and the metadata); the released views stay
  unchanged.
"""

from collections.abc import Sequence

from alembic import op
from psycopg import sql

from metis_pg import sqlfiles

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DOCUMENTS_COLUMNS = {
    "base": "Name of the base the document belongs to.",
    "source": "Name of the source (folder) the document was read from; a base's notes are metis-<base>.",
    "document": "Path of the document, relative to its source's folder.",
    "title": "Title of the document.",
    "kind": "Kind of the document: md, txt, html, pdf or docx.",
    "tags": "Its tags, lower case (front matter tags/keywords, <meta name=keywords>, PDF and DOCX keywords).",
    "author": "Its (first) author, or NULL.",
    "category": "Its category, or NULL.",
    "date": "When the document says it was written (front matter date, PDF/DOCX created), or NULL.",
    "modified_at": "Modification time of the file when it was last read, or NULL (indexed before revision 0015).",
    "language": "Its language tag (lower case), or NULL.",
    "meta": "Every other key of its metadata, as JSON.",
    "size_bytes": "Size of the file (bytes).",
    "chunks": "Chunks it was cut into.",
    "indexed_at": "When this version of the document was written.",
}
V4_COLUMNS = {
    "base": "Name of the base the chunk belongs to.",
    "source": "Name of the source (folder) the document was read from; a base's notes are metis-<base>.",
    "document": "Path of the document, relative to its source's folder.",
    "title": "Title of the document.",
    "kind": "Kind of the document: md, txt, html, pdf or docx.",
    "headings": "Heading path above the chunk, outermost first.",
    "page_start": "1-based PDF page where the chunk starts; NULL for other kinds.",
    "page_end": "1-based PDF page where the chunk ends (a chunk never crosses a page: page_start); NULL for other"
                " kinds.",
    "line_start": "1-based line of the file where the chunk starts; NULL for PDF and docx chunks.",
    "line_end": "1-based line of the file where the chunk ends; NULL for PDF and docx chunks.",
    "text": "The whole text of the chunk (at most the base's chunk_size characters).",
    "chunk_id": "Id of the chunk (the chunk_id of a search result).",
    "ordinal": "0-based position of the chunk in its document.",
    "tags": "Tags of the document, lower case.",
    "author": "Author of the document, or NULL.",
    "category": "Category of the document, or NULL.",
    "date": "The document's date, else its file's modification time (what since/until filter on), or NULL.",
}


def _execute(statement: sql.Composable) -> None:
    op.execute(statement.as_string())


def _view(name: str, body: str, comment: str, columns: dict[str, str]) -> None:
    view = sql.Identifier("metis", name)
    _execute(sql.SQL("CREATE VIEW {} AS\n{}").format(view, sql.SQL(body)))
    _execute(sql.SQL("COMMENT ON VIEW {} IS {}").format(view, sql.Literal(comment)))
    for column, text in columns.items():
        _execute(sql.SQL("COMMENT ON COLUMN {}.{} IS {}").format(view, sql.Identifier(column), sql.Literal(text)))
    _execute(sql.SQL("GRANT SELECT ON {} TO metis_analyst").format(view))


def upgrade() -> None:
    # Constant defaults: PostgreSQL adds the columns without rewriting the table.
    op.execute(
        """
        ALTER TABLE documents
            ADD COLUMN tags        text[] NOT NULL DEFAULT '{}',
            ADD COLUMN author      text,
            ADD COLUMN category    text,
            ADD COLUMN date        timestamptz,
            ADD COLUMN modified_at timestamptz,
            ADD COLUMN language    text,
            ADD COLUMN meta        jsonb NOT NULL DEFAULT '{}'
        """
    )
    op.execute("CREATE INDEX ix_documents_tags ON documents USING gin (tags)")
    op.execute("ALTER TABLE bases ADD COLUMN watched_at timestamptz, ADD COLUMN caught_up_at timestamptz")
    op.execute("COMMENT ON COLUMN bases.watched_at IS 'last sign of life of a metis watch following the base'")
    op.execute("COMMENT ON COLUMN bases.caught_up_at IS "
               "'when a metis watch last finished indexing what changed in the base''s folders'")
    _view("documents", sqlfiles.load("views/documents.v1"),
          "Every document of every base with its metadata (tags, author, category, date, language).",
          DOCUMENTS_COLUMNS)
    _view("chunk_citations_v4", sqlfiles.load("views/chunk_citations.v4"),
          "Every chunk with its citation, the lines (or pages) it spans and its document's tags, author,"
          " category and date; version 4 of chunk_citations.", V4_COLUMNS)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS metis.chunk_citations_v4")
    op.execute("DROP VIEW IF EXISTS metis.documents")
    op.execute("ALTER TABLE bases DROP COLUMN caught_up_at, DROP COLUMN watched_at")
    op.execute("DROP INDEX IF EXISTS ix_documents_tags")
    op.execute("ALTER TABLE documents DROP COLUMN meta, DROP COLUMN language, DROP COLUMN modified_at,"
               " DROP COLUMN date, DROP COLUMN category, DROP COLUMN author, DROP COLUMN tags")
