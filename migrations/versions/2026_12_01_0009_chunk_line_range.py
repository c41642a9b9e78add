"""chunks.line_end and chunks.line_map (the cited line); view metis.chunk_citations_v2

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01

Issue 14, "The cited line":

- ``chunks.line_end`` (integer): the source line of the chunk's last character
  (md, txt, html; NULL for PDF and docx, and for HTML chunks written before this
  revision). Filled here for md and txt chunks (their first line + the newlines of
  their text, exact: their text is the file's).
- ``chunks.line_map`` (integer[]): where the source line of a character is not the
  chunk's first line + the newlines before it (HTML, whose whitespace the reader
  collapses): flattened ``(offset in text, line)`` pairs; NULL when counting
  newlines is exact. A search cites the line of its snippet's sentence from it
  (``metis_pg.chunking.Chunk.line_at``).
- View ``metis.chunk_citations_v2`` (``sql/views/chunk_citations.v2.sql``):
  version 1's columns with the range (``line_start``, ``line_end``;
  ``page_start``, ``page_end``) in place of ``line`` and ``page``. Version 1 is
  released and stays unchanged.
"""

from collections.abc import Sequence

from alembic import op
from psycopg import sql

from metis_pg import sqlfiles

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

V2_COLUMNS = {
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
    "line_end": "1-based line of the file where the chunk ends; NULL for PDF and docx chunks (HTML chunks indexed"
                " before revision 0009: line_start).",
    "text": "The whole text of the chunk (at most the base's chunk_size characters).",
    "chunk_id": "Id of the chunk (the chunk_id of a search result).",
    "ordinal": "0-based position of the chunk in its document.",
}


def _execute(statement: sql.Composable) -> None:
    op.execute(statement.as_string())


def upgrade() -> None:
    op.execute("ALTER TABLE chunks ADD COLUMN line_end integer, ADD COLUMN line_map integer[]")
    op.execute(
        """
        UPDATE chunks AS c
           SET line_end = c.line + length(c.text) - length(replace(c.text, E'\\n', ''))
          FROM documents AS d
         WHERE d.document_id = c.document_id AND d.kind IN ('md', 'txt') AND c.line IS NOT NULL
        """
    )
    body = sqlfiles.load("views/chunk_citations.v2")
    view = sql.Identifier("metis", "chunk_citations_v2")
    _execute(sql.SQL("CREATE VIEW {} AS\n{}").format(view, sql.SQL(body)))
    _execute(sql.SQL("COMMENT ON VIEW {} IS {}").format(view, sql.Literal(
        "Every chunk of every base with its citation and the lines (or pages) it spans (SPEC F4, F13);"
        " version 2 of chunk_citations.")))
    for column, text in V2_COLUMNS.items():
        _execute(sql.SQL("COMMENT ON COLUMN {}.{} IS {}").format(view, sql.Identifier(column), sql.Literal(text)))
    _execute(sql.SQL("GRANT SELECT ON {} TO metis_analyst").format(view))


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS metis.chunk_citations_v2")
    op.execute("ALTER TABLE chunks DROP COLUMN line_map, DROP COLUMN line_end")
