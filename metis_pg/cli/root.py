"""The ``metis`` Typer apps (the root and its groups) and :func:`main`, where errors become exit codes."""

# No `from __future__ import annotations`: Typer would compile the options' annotation strings at each run
# (search's module: Typer's build 9 -> 3 ms of CPU; issue 25).

import contextlib
import logging
import sys
import warnings
from typing import Annotated

import typer

from ..errors import MetisError
from .render import ClosedPipe, Renderer

__all__ = ["app", "base_app", "db_app", "replica_app", "eos_app", "note_app", "main"]

# Plain (click) help, not rich panels: flags show as flags (rich help printed `--json <bool>`), and
# docs/cli.md is that text. --install-completion / --show-completion come from Typer (bash, zsh, fish).
app = typer.Typer(help="Hybrid search over documents in PostgreSQL (pgvector + BM25, fused by RRF).",
                  no_args_is_help=True, add_completion=True, pretty_exceptions_enable=False, rich_markup_mode=None)
base_app = typer.Typer(help="Create, list and drop bases.", no_args_is_help=True, rich_markup_mode=None)
db_app = typer.Typer(help="The database: schema (Alembic migrations), the embedded server, local read replicas.",
                     no_args_is_help=True, rich_markup_mode=None)
replica_app = typer.Typer(help="Local streaming standbys of the database (read replicas).", no_args_is_help=True,
                          rich_markup_mode=None)
eos_app = typer.Typer(help="The local Eos model server (bundled embedding model).", no_args_is_help=True,
                      rich_markup_mode=None)
note_app = typer.Typer(help="A base's own notes: documents of the source metis-<base>.", no_args_is_help=True,
                       rich_markup_mode=None)
app.add_typer(base_app, name="base")
app.add_typer(db_app, name="db")
app.add_typer(eos_app, name="eos")
app.add_typer(note_app, name="note")
db_app.add_typer(replica_app, name="replica")

# The index report lists every skipped file and why: the indexer's log lines (printed by
# logging's last-resort handler when nothing is configured) would say it twice.
logging.getLogger("metis_pg.indexing").addHandler(logging.NullHandler())
# psycopg's pool logs each failed connection attempt; the one error the seam raises says it once.
logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())

_INTERRUPTED = ("interrupted: what was written is kept; run the command again to continue"
                " (`metis index` skips what it already indexed)")


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        Renderer().out.print(f"metis_pg {version('metis_pg')}")
        raise typer.Exit()


@app.callback()
def _metis(
    version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                          help="Print the version of metis_pg and exit.")] = False,
) -> None:
    """Hybrid search over documents in PostgreSQL (pgvector + BM25, fused by RRF)."""


def _quiet_stdout() -> None:
    """Point stdout at /dev/null: the reader of a closed pipe is gone, and Python's last flush would complain."""
    import os

    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def main() -> None:
    """Entry point of the ``metis`` console script: one place turns errors into exit codes.

    The run's :class:`Renderer` goes to the commands as click's context object; a command sets its format,
    and an error is printed here in that format (``--json``: JSON on stdout).
    """
    # platformdirs' RuntimeDirWarning (two lines at pgserver's import when XDG_RUNTIME_DIR is unset or not
    # 0700) breaks `metis ... 2>&1 | jq`, and asks nothing of the user: pgserver falls back to a folder
    # of this user (metis_pg.db.prepare_pgserver_import).
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
    r = Renderer()
    try:
        code = app(standalone_mode=False, obj=r)
        if isinstance(code, int) and code:
            # Typer turns Ctrl-C into a returned 130 when not standalone: say so, and exit with it.
            if code == 130:
                r.err.print(_INTERRUPTED)
            sys.exit(code)
    except ClosedPipe:
        _quiet_stdout()
        sys.exit(0)
    except KeyboardInterrupt:
        r.err.print(_INTERRUPTED)
        sys.exit(130)
    except MetisError as exc:
        r.error(exc)
        sys.exit(exc.exit_code)
    except (typer.Exit, SystemExit) as exc:
        code = getattr(exc, "exit_code", None)
        sys.exit(code if code is not None else getattr(exc, "code", 0))
    except typer.Abort:
        r.err.print("aborted")
        sys.exit(130)
    except Exception as exc:  # click usage errors carry their own exit code (2)
        import click

        # Recent Typer (0.29 here) raises its own copy of click's exceptions (typer._click), not click's.
        if isinstance(exc, (click.ClickException, typer.TyperException)) and hasattr(exc, "show"):
            exc.show()
            sys.exit(exc.exit_code)
        raise
