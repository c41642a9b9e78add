"""Options several commands share, and opening the library (:func:`open_metis`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from ..errors import InvalidInput

if TYPE_CHECKING:  # pragma: no cover
    from ..api import Metis

__all__ = ["DsnOption", "JsonOption", "JsonlOption", "CsvOption", "MdOption", "FilesOption", "open_metis",
           "fusion_option", "TagOption", "TagsAllOption", "ExcludeTagOption", "AuthorOption", "CategoryOption",
           "SinceOption", "UntilOption", "ExcludeOption", "MetaOption", "metadata_filters", "AsOption", "principals_option"]

DsnOption = Annotated[Optional[str], typer.Option("--dsn", envvar="METIS_DATABASE_URL",
                                                  help="PostgreSQL URL; default: the embedded server.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]
JsonlOption = Annotated[bool, typer.Option("--jsonl", help="Print one JSON object per line (per result, per document).")]
CsvOption = Annotated[bool, typer.Option("--csv", help="Print CSV with a header row.")]
MdOption = Annotated[bool, typer.Option("--md", help="Print Markdown: a list of cited passages (documents) to paste.")]
FilesOption = Annotated[bool, typer.Option("--files", help="Print document paths only, one per line, each once.")]

# The metadata filters (issue 21) of `metis search` and `metis ls`: metis_pg.filters.Filters.
TagOption = Annotated[Optional[list[str]], typer.Option(
    "--tag", help="Keep documents with this tag; repeated: with any of them (case-insensitive).")]
TagsAllOption = Annotated[Optional[str], typer.Option(
    "--tags-all", help="Keep documents with every one of these tags, separated by commas.")]
ExcludeTagOption = Annotated[Optional[list[str]], typer.Option(
    "--exclude-tag", help="Drop documents with this tag (repeatable).")]
AuthorOption = Annotated[Optional[list[str]], typer.Option("--author", help="Keep documents by this author (repeatable).")]
CategoryOption = Annotated[Optional[list[str]], typer.Option(
    "--category", help="Keep documents of this category (repeatable).")]
SinceOption = Annotated[Optional[str], typer.Option(
    "--since", help="Keep documents dated from this ISO date or date-time on (their date, else the file's mtime).")]
UntilOption = Annotated[Optional[str], typer.Option(
    "--until", help="Keep documents dated until this ISO date (inclusive) or date-time.")]
ExcludeOption = Annotated[Optional[list[str]], typer.Option(
    "--exclude", help="Drop documents whose path starts with this (repeatable).")]
# Who reads (issue 21): an operator checking what a group sees (docs/security.md).
AsOption = Annotated[Optional[list[str]], typer.Option(
    "--as", help="Read as these groups only (repeatable, or comma-separated): what their members would see. "
                 "'--as \'\'' reads as a caller without groups (documents without readers).")]


def principals_option(value: list[str] | None) -> list[str] | None:
    """The principals of ``--as`` (None: not given, the operator sees every document).

    Raises:
        InvalidInput: a malformed group name.
    """
    if value is None:
        return None
    from ..access import check_groups

    return list(check_groups(",".join(value), what="group of --as"))


MetaOption = Annotated[Optional[list[str]], typer.Option(
    "--meta", help="Keep documents whose front matter / properties have KEY=VALUE (repeatable: all must hold).")]


def metadata_filters(tag: list[str] | None, tags_all: str | None, exclude_tag: list[str] | None,
                     author: list[str] | None, category: list[str] | None, since: str | None, until: str | None,
                     exclude: list[str] | None, meta: list[str] | None) -> dict[str, Any]:
    """Return the filters mapping of the metadata options given (checked by ``Filters.from_mapping``)."""
    all_tags = [t.strip() for t in (tags_all or "").split(",") if t.strip()]
    given = {"tags_any": tag, "tags_all": all_tags, "exclude_tags": exclude_tag, "authors": author,
             "categories": category, "since": since, "until": until, "exclude_prefixes": exclude, "meta": meta}
    return {k: v for k, v in given.items() if v}


def open_metis(dsn: str | None, *, upgrade: bool = False) -> "Metis":
    """Connect to the database (`dsn`, else the embedded server); `upgrade` brings its schema to head first.

    The environment's settings are read once, here (the command's entry point), and handed down: a
    :class:`~metis_pg.Metis` given none reads them again at each use (~1.5 ms of CPU each, three
    times in a search; issue 25).
    """
    from ..api import connect  # imported here: `metis --help` needs none of it
    from ..config import Settings

    return connect(dsn, upgrade=upgrade, settings=Settings.from_env())


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
