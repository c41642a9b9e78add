"""Load the SQL files of ``sql/`` by name: the one place SQL text comes from.

``load("search/hybrid")`` reads ``metis_pg/sql/search/hybrid.sql`` in an
installed wheel (the build force-includes the root ``sql/`` there) or the
checkout's ``sql/search/hybrid.sql`` in a development install. Files are read
once and cached; their text is constant, so it is safe to hand to psycopg.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

__all__ = ["load", "sql_root"]


@cache
def sql_root() -> Path:
    """Return the folder the SQL files are read from."""
    packaged = Path(str(resources.files("metis_pg"))) / "sql"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "sql"


@cache
def load(name: str) -> str:
    """Return the text of ``sql/<name>.sql``.

    Raises:
        FileNotFoundError: no such file (a bug: names are constants in the code).
    """
    return (sql_root() / f"{name}.sql").read_text(encoding="utf-8")
