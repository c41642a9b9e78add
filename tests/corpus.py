"""Writing small corpora for the tests (not a test module)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from metis_pg.chunking import embedding_text
from metis_pg.config import DEFAULT_FIELD_WEIGHT
from metis_pg.tokenizer import terms


def weighted_terms(title: str, headings: Sequence[str], text: str, weight: int = DEFAULT_FIELD_WEIGHT) -> list[str]:
    """A chunk's BM25 terms as a base of this field weight indexes them, written here apart from
    ``chunking.chunk_terms``: the embedding text's terms, and the heading path's ``weight - 1`` times more."""
    return terms(embedding_text(title, headings, text)) + terms(embedding_text(title, headings, "")) * (weight - 1)


def write_corpus(folder: Path, files: dict[str, str]) -> Path:
    """Write ``{relative path: text}`` under `folder` (created, with any subfolders); return `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return folder


#: The small handbook the CLI and MCP tests index: a Markdown page with headings (``[x]``: a
#: passage holding Rich markup, printed as written) and a one-line text file.
LEAVE = """# Handbook

## Leave policy

### Vacation

Full-time staff get 25 days of paid vacation per calendar year.
Ask with [the leave form](forms/leave.pdf) two weeks ahead.

## Expenses

Keep every receipt [x] and file it within 30 days.
"""

ROUTER = "Reset the router using the red button for ten seconds."


def write_handbook(folder: Path) -> Path:
    """Write the handbook (``guide/leave.md``: :data:`LEAVE`, ``router.txt``: :data:`ROUTER`) under `folder`."""
    return write_corpus(folder, {"guide/leave.md": LEAVE, "router.txt": ROUTER})
