"""narrower posting rows: no tier column, no tfs where every posting has the tf max_tf

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-04

Issue 24 (size). ``posting_blocks`` was 4.8 of the 6.7 MB a base needs per 1,000 chunks
(docs/performance.md, "Where the bytes go"); 70% of its rows hold one posting. Its rows now:

- have 8 columns, not 9, in an order with no alignment padding (four int4, then two int2, then
  the lists): a row with a NULL has a 1-byte null bitmap, which fits in the 24 bytes of the row
  header only up to 8 columns (9 made every one-posting row 8 bytes longer);
- drop ``tier``: a row's tier is its max_tf's (0 for tf 1, 1 for 2-3, 2 for 4-7, 3 for 8+; every
  posting of a row has the same tier), so the primary key is (base_id, term_id, block_no, max_tf)
  and tier >= t reads max_tf >= 2^t;
- store ``tfs`` only when the postings of the row do not all have the tf max_tf (a tier-0 row's
  are all 1): a posting's tf is coalesce(tfs[i], max_tf).

The same postings, bounds and lengths: every search gives the same chunks and scores
(tests/test_narrow_posting_rows.py). ``sql/search/bm25_top_k.v5.sql`` reads the new rows (and
makes v3's 7-argument function call v4's with its two filters off); views ``metis.postings``
and ``metis.postings_v2`` are replaced by ``sql/views/postings.v3.sql`` (same columns and rows).

Upgrade: the table is rebuilt (a new table filled by one INSERT ... SELECT in block order, then its
primary key, BRIN index, grants and row-level security policies), holding an exclusive lock on it
meanwhile (searches and indexing wait). On Citus, where the old table is distributed, the new one
is distributed the same way before it is filled and gets no policies (``sql/citus/distribute.sql``
drops them there). Downgrade rebuilds the 9-column rows and loads v3's and v4's functions again.
"""

import re
from collections.abc import Sequence

from alembic import op
from psycopg import sql

from metis_pg import sqlfiles

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The rows of this revision (see the docstring).
NEW_TABLE = """
CREATE TABLE posting_blocks (
    base_id      integer NOT NULL,
    term_id      integer NOT NULL,
    block_no     integer NOT NULL,
    min_length   integer NOT NULL,
    max_tf       smallint NOT NULL,
    first_offset smallint NOT NULL,
    offsets      smallint[],
    tfs          smallint[],
    CONSTRAINT ck_posting_blocks_lists CHECK (offsets IS NOT NULL OR tfs IS NULL)
)
"""
NEW_ROWS = """
INSERT INTO posting_blocks (base_id, term_id, block_no, min_length, max_tf, first_offset, offsets, tfs)
SELECT base_id, term_id, block_no, min_length, max_tf, first_offset, offsets,
       CASE WHEN tfs IS NOT NULL AND NOT max_tf = ALL(tfs) THEN tfs END
FROM posting_blocks_previous
ORDER BY base_id, block_no, term_id, tier
"""
NEW_KEY = "(base_id, term_id, block_no, max_tf)"

#: The rows of revisions 0011 to 0022.
OLD_TABLE = """
CREATE TABLE posting_blocks (
    base_id      integer NOT NULL,
    term_id      integer NOT NULL,
    tier         smallint NOT NULL,
    block_no     integer NOT NULL,
    max_tf       smallint NOT NULL,
    min_length   integer NOT NULL,
    first_offset smallint NOT NULL,
    offsets      smallint[],
    tfs          smallint[],
    CONSTRAINT ck_posting_blocks_arrays CHECK ((offsets IS NULL) = (tfs IS NULL))
)
"""
OLD_ROWS = """
INSERT INTO posting_blocks (base_id, term_id, tier, block_no, max_tf, min_length, first_offset, offsets, tfs)
SELECT base_id, term_id,
       CASE WHEN max_tf >= 8 THEN 3 WHEN max_tf >= 4 THEN 2 WHEN max_tf >= 2 THEN 1 ELSE 0 END,
       block_no, max_tf, min_length, first_offset, offsets,
       CASE WHEN offsets IS NOT NULL THEN coalesce(tfs, array_fill(max_tf, ARRAY[cardinality(offsets)])) END
FROM posting_blocks_previous
ORDER BY base_id, block_no, term_id, max_tf
"""
OLD_KEY = "(base_id, term_id, block_no, tier)"

COMMENT = "BM25 postings of a term in the 256 chunk ids of a block (chunk_id = block_no * 256 + offset)"


def _distributed(table: str) -> bool:
    """Whether `table` is a Citus distributed table (False without Citus)."""
    bind = op.get_bind()
    if bind.exec_driver_sql("SELECT to_regclass('pg_catalog.pg_dist_partition') IS NULL").scalar():
        return False
    return bool(bind.exec_driver_sql(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = %s::regclass)",
        (table,)).scalar())


def _policies() -> list[str]:
    """The released statements of posting_blocks' row-level security (sql/access/policies.v1.sql)."""
    return [s.strip() for s in sqlfiles.load("access/policies.v1").split(";")
            if re.search(r"(ALTER TABLE| ON) posting_blocks\b", s)]


def _rebuild(table: str, rows: str, key: str, views: dict[str, str]) -> None:
    """Replace posting_blocks by a table made by `table`, filled by `rows` from the old one, keyed
    by `key`, with its index, comment, grants and policies, and the views of `views` (name -> body)
    reading it."""
    op.execute("LOCK TABLE posting_blocks IN ACCESS EXCLUSIVE MODE")
    distributed = _distributed("posting_blocks")
    op.execute("ALTER TABLE posting_blocks RENAME TO posting_blocks_previous")
    op.execute(table)
    if distributed:
        op.execute("SELECT create_distributed_table('posting_blocks', 'base_id', colocate_with => 'documents')")
    op.execute(rows)
    for view, body in views.items():
        op.execute(sql.SQL("CREATE OR REPLACE VIEW {} AS\n{}").format(
            sql.Identifier("metis", view), sql.SQL(body)).as_string())
    op.execute("DROP TABLE posting_blocks_previous")
    op.execute(f"ALTER TABLE posting_blocks ADD CONSTRAINT pk_posting_blocks PRIMARY KEY {key}")
    # Deletes find a block's rows by block number: rows are written block after block, so a BRIN
    # index (a few pages) narrows them to the pages of the batch that wrote them (migration 0011).
    op.execute("CREATE INDEX ix_posting_blocks_block ON posting_blocks USING brin (base_id, block_no)"
               " WITH (pages_per_range = 16)")
    op.execute(f"COMMENT ON TABLE posting_blocks IS '{COMMENT}'")
    op.execute("GRANT SELECT ON posting_blocks TO metis_search, metis_views")
    if not distributed:
        for statement in _policies():
            op.execute(statement)
    op.execute("ANALYZE posting_blocks")


def upgrade() -> None:
    view = sqlfiles.load("views/postings.v3")
    _rebuild(NEW_TABLE, NEW_ROWS, NEW_KEY, {"postings": view, "postings_v2": view})
    op.execute(sqlfiles.load("search/bm25_top_k.v5"))


def downgrade() -> None:
    _rebuild(OLD_TABLE, OLD_ROWS, OLD_KEY,
             {"postings": sqlfiles.load("views/postings.v1"), "postings_v2": sqlfiles.load("views/postings.v2")})
    op.execute(sqlfiles.load("search/bm25_top_k.v3"))
    op.execute(sqlfiles.load("search/bm25_top_k.v4"))
