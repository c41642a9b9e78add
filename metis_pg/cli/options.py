"""Options several commands share, and opening the library (:func:`open_metis`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from ..errors import InvalidInput

if TYPE_CHECKING:  # pragma: no cover
    from ..api import Metis

__all__ = ["DsnOption", "JsonOption", "JsonlOption", "CsvOption", "MdOption", "FilesOption", "open_metis",
           "fusion_option"]

DsnOption = Annotated[Optional[str], typer.Option("--dsn", envvar="METIS_DATABASE_URL",
                                                  help="PostgreSQL URL; default: the embedded server.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]
JsonlOption = Annotated[bool, typer.Option("--jsonl", help="Print one JSON object per line (per result, per document).")]
CsvOption = Annotated[bool, typer.Option("--csv", help="Print CSV with a header row.")]
MdOption = Annotated[bool, typer.Option("--md", help="Print Markdown: a list of cited passages (documents) to paste.")]
FilesOption = Annotated[bool, typer.Option("--files", help="Print document paths only, one per line, each once.")]


def open_metis(dsn: str | None, *, upgrade: bool = False) -> "Metis":
    """Connect to the database (`dsn`, else the embedded server); `upgrade` brings its schema to head first."""
    from ..api import connect  # imported here: `metis --help` needs none of it

    return connect(dsn, upgrade=upgrade)


def fusion_option(weights: str | None, rrf_k: int | None) -> dict[str, Any] | None:
    """Return the search's fusion override of ``--weights D:K`` and ``--rrf-k``, None when neither is given.

    Raises:
        InvalidInput: ``--weights`` is not two numbers separated by a colon (their range is
            checked by the search).
    """
    fusion: dict[str, Any] = {}
    if weights is not None:
        parts = weights.split(":")
        try:
            if len(parts) != 2:
                raise ValueError
            fusion["dense_weight"], fusion["keyword_weight"] = (float(p) for p in parts)
        except ValueError:
            raise InvalidInput(f"--weights must be DENSE:KEYWORD, two numbers such as 1.5:1, not {weights!r}") from None
    if rrf_k is not None:
        fusion["rrf_k"] = rrf_k
    return fusion or None
