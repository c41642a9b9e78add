"""A base's notes and a memory base's facts (SPEC F2, F3, F11): ``metis note``, ``metis remember``, ``metis facts``."""

# No `from __future__ import annotations`: Typer would compile the options' annotation strings at each run
# (search's module: Typer's build 9 -> 3 ms of CPU; issue 25).

import sys
from typing import Annotated, Optional

import typer

from .options import AsOption, DsnOption, JsonOption, open_metis, principals_option
from .render import renderer
from .root import app, note_app

__all__ = ["note_add", "note_list", "note_delete", "remember", "facts"]


@note_app.command("add")
def note_add(
    ctx: typer.Context,
    base: Annotated[str, typer.Argument(help="The base.")],
    text: Annotated[str, typer.Argument(help="The note's text; - reads it from standard input.")],
    title: Annotated[str, typer.Option("--title", "-t", help="The note's title (one line).")],
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Add a note to a base; it is searched like any document (--source metis-BASE keeps notes only).

    Example: metis note add docs --title "Release plan" "The reranker ships in Q1."
    """
    r = renderer(ctx)
    r.choose(json=as_json)
    if text == "-":
        text = sys.stdin.read()
    with open_metis(dsn) as m:
        note_id = m.add_note(base, title, text)
    if as_json:
        r.json({"note_id": note_id, "base": base})
    else:
        r.out.print(f"added note {note_id} to {base}")


@note_app.command("list")
def note_list(ctx: typer.Context, base: Annotated[str, typer.Argument(help="The base.")],
              as_group: AsOption = None, dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """List a base's notes, oldest first.

    Example: metis note list docs
    """
    r = renderer(ctx)
    r.choose(json=as_json)
    with open_metis(dsn) as m:
        found = m.notes(base, principals=principals_option(as_group))
    if as_json:
        r.json([n.to_dict() for n in found])
        return
    if not found:
        r.out.print("no notes")
    for n in found:
        first = n.text.splitlines()[0] if n.text else ""
        r.out.print(f"{n.note_id}. {n.title} · {n.created_at[:19]} · {first[:80]}")


@note_app.command("delete")
def note_delete(ctx: typer.Context, base: Annotated[str, typer.Argument(help="The base.")],
                note_id: Annotated[int, typer.Argument(help="The note's id (metis note list).")],
                dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """Delete a note with its chunks, vectors and terms.

    Example: metis note delete docs 42
    """
    r = renderer(ctx)
    r.choose(json=as_json)
    with open_metis(dsn) as m:
        m.delete_note(base, note_id)
    if as_json:
        r.json({"deleted": note_id, "base": base})
    else:
        r.out.print(f"deleted note {note_id} of {base}")


@app.command()
def remember(
    ctx: typer.Context,
    base: Annotated[str, typer.Argument(help="A memory base (metis base create NAME --kind memory).")],
    text: Annotated[str, typer.Argument(help="The fact.")],
    key: Annotated[Optional[str], typer.Option("--key", help="What it is about: replaces the fact holding this key.")] = None,
    supersedes: Annotated[Optional[int], typer.Option("--supersedes", help="Id of the fact it replaces.")] = None,
    observed_at: Annotated[Optional[str], typer.Option("--observed-at", help="When it was true (ISO 8601; default now).")] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Store a fact in a memory base; a newer fact with the same key replaces the old one (kept, marked replaced).

    Example: metis remember team "Ana works on search" --key ana/role
    """
    r = renderer(ctx)
    r.choose(json=as_json)
    with open_metis(dsn) as m:
        fact_id = m.remember(base, text, key=key, supersedes=supersedes, observed_at=observed_at)
    if as_json:
        r.json({"fact_id": fact_id, "base": base})
    else:
        r.out.print(f"remembered fact {fact_id} in {base}")


@app.command()
def facts(
    ctx: typer.Context,
    base: Annotated[str, typer.Argument(help="A memory base.")],
    holding: Annotated[bool, typer.Option("--holding", help="Only the facts that still hold.")] = False,
    as_group: AsOption = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """List the facts of a memory base in the order they were observed, each holding or replaced.

    Example: metis facts team --holding
    """
    r = renderer(ctx)
    r.choose(json=as_json)
    with open_metis(dsn) as m:
        found = m.facts(base, holding_only=holding, principals=principals_option(as_group))
    if as_json:
        r.json([f.to_dict() for f in found])
        return
    if not found:
        r.out.print("no facts")
    for f in found:
        state = "holds" if f.holds else f"replaced by {f.superseded_by} on {(f.superseded_at or '')[:10]}"
        key = f" [{f.key}]" if f.key else ""
        r.out.print(f"{f.fact_id}. {f.observed_at[:10]}{key} {f.text} · {state}")
