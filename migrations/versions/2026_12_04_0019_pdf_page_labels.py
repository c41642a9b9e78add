"""chunks.page_label: the printed label of a PDF chunk's page; view metis.chunk_citations_v5

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-04

Issue 25: a PDF whose page 19 prints "16" (front matter numbered apart, /PageLabels) is cited as
``p.19 (printed 16)``. ``chunks.page_label`` (text, NULL when the PDF has no page labels and for
other kinds) keeps the label of the chunk's page (a chunk never crosses a page). Filled by the next
``metis index``: the PDF reader's version went up (metis_pg.readers.READER_VERSIONS), so every PDF is
read once more (vectors of unchanged chunk texts are kept). The column is added without a rewrite
(no default). View ``metis.chunk_citations_v5`` (``sql/views/chunk_citations.v5.sql``) is version 4
with ``page_label``; the released views stay unchanged.
"""

from collections.abc import Sequence

from alembic import op
from psycopg import sql

from metis_pg import sqlfiles

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

V5_COLUMNS = {
    "base": "Name of the base the chunk belongs to.",
    "source": "Name of the source (folder) the document was read from; a base's notes are metis-<base>.",
    "document": "Path of the document, relative to its source's folder.",
    "title": "Title of the document.",
    "kind": "Kind of the document: md, txt, html, pdf or docx.",
    "headings": "Heading path above the chunk, outermost first.",
    "page_start": "1-based PDF page where the chunk starts; NULL for other kinds.",
    "page_end": "1-based PDF page where the chunk ends (a chunk never crosses a page: page_start); NULL for other"
                " kinds.",
    "page_label": "The page's printed label when the PDF has page labels (page 19 may print 16, or xii); NULL"
                  " otherwise and for other kinds.",
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


def upgrade() -> None:
    op.execute("ALTER TABLE chunks ADD COLUMN page_label text")
    op.execute("COMMENT ON COLUMN chunks.page_label IS "
               "'printed label of the PDF page (/PageLabels), NULL when the PDF has none and for other kinds'")
    view = sql.Identifier("metis", "chunk_citations_v5")
    _execute(sql.SQL("CREATE VIEW {} AS\n{}").format(view, sql.SQL(sqlfiles.load("views/chunk_citations.v5"))))
    _execute(sql.SQL("COMMENT ON VIEW {} IS {}").format(view, sql.Literal(
        "Every chunk with its citation, the lines (or pages, with their printed labels) it spans and its"
        " document's tags, author, category and date; version 5 of chunk_citations.")))
    for column, text in V5_COLUMNS.items():
        _execute(sql.SQL("COMMENT ON COLUMN {}.{} IS {}").format(view, sql.Identifier(column), sql.Literal(text)))
    _execute(sql.SQL("GRANT SELECT ON {} TO metis_analyst").format(view))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS metis.chunk_citations_v5")
    op.execute("ALTER TABLE chunks DROP COLUMN page_label")
