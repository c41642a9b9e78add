"""The ``metis`` command (SPEC F18): parses, calls :mod:`metis_pg.api`, prints.

Exit codes: 0 ok, 1 a bug (with traceback), 2 invalid input, 3 a model did not
answer (``mode dense``), 4 base (or document) not found, 5 database unavailable,
6 base busy, 7 port in use (``serve``), 130 interrupted. Errors are one
line ``error [CODE]: message`` on stderr, or with ``--json`` the object
``{"error": {"code", "message"}}`` on stdout.

=================  ===========================================================================
``root``           the Typer apps (``metis`` and its groups) and :func:`main`, errors to exit codes
``render``         :class:`~metis_pg.cli.render.Renderer`: what a run prints, people's and machines' formats
``options``        options several commands share; opening the library
``progress``       the indexing and embedding bars
``indexing``       ``index``, ``watch``, ``reembed``, ``demo``
``searching``      ``search``, ``get``, ``ls``, ``eval``
``bases``          ``base create|list|drop``, ``status``
``memory``         ``note add|list|delete``, ``remember``, ``facts``
``servers``        ``db ...``, ``db replica ...``, ``eos serve``, ``serve``, ``mcp``
=================  ===========================================================================
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["app", "main", "script"]

# `metis --help` lists the commands in this order (each topic module registers its own).
_ORDER = ("index", "watch", "search", "get", "ls", "eval", "status", "reembed", "remember", "facts", "serve", "mcp",
          "demo")


#: The topic module registering each command of :data:`ONE_SHOT`.
_TOPIC = {"search": "searching", "get": "searching", "ls": "searching", "status": "bases"}


def _app(command: str | None = None) -> Any:
    """Return the root Typer app with every command registered (importing the topic modules once), or for a
    `command` of :data:`ONE_SHOT` at least those of its own topic module.

    Typer builds the Click command of every registered command at each run: ~30 ms of CPU for all of them,
    ~10 for the module of ``search`` (issue 25). The other modules are imported (registering theirs) by the
    next call without a `command`, e.g. ``metis --help``, a command of another module, a mistyped one.
    """
    from importlib import import_module

    from .root import app

    for topic in (_TOPIC[command],) if command in _TOPIC else ("bases", "indexing", "memory", "searching", "servers"):
        import_module(f"{__name__}.{topic}")  # each registers its commands

    app.registered_commands.sort(key=lambda c: _ORDER.index(c.name or c.callback.__name__))
    return app


def __getattr__(name: str) -> Any:
    # `app` is built on first use: `metis --version` needs neither Typer nor rich nor the settings.
    if name == "app":
        return _app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Commands that answer and end (no server, watch, indexing or bars): the console script sets their process up
#: for a short life (:func:`one_shot_process`).
ONE_SHOT = ("search", "get", "ls", "status")


def main() -> None:
    """Entry point of the ``metis`` console script (:func:`metis_pg.cli.root.main`)."""
    if sys.argv[1:] == ["--version"]:  # the one answer that needs no command tree
        from importlib.metadata import version

        sys.stdout.write(f"metis_pg {version('metis_pg')}\n")
        return
    _app(sys.argv[1] if len(sys.argv) > 1 else None)
    from .root import main as run

    run()


def one_shot_process() -> bool:
    """Set this process up for a command of :data:`ONE_SHOT` (the first argument); return whether it is one.

    The console script calls it first (before any import of numpy), for a process that ends with the
    command (issue 25, ``benchmarks/cli_startup.py``):

    - the cyclic garbage collector is turned off (``gc.disable``) to the exit: the ~140 collections Python
      ran while a search imported its ~520 modules scanned objects that all live until the end, 40-70 ms of
      CPU at load 10 (``gc.callbacks``); what the command leaves in cycles is freed by its exit;
    - OpenBLAS (numpy's) starts no thread pool (``OPENBLAS_NUM_THREADS=1``, unless set): a question's vector
      needs no parallel linear algebra, and starting the pool made ``import numpy`` 60 → 80 ms of CPU and
      ~120 → ~250 ms of wall time at load 6.
    """
    if not (len(sys.argv) > 1 and sys.argv[1] in ONE_SHOT):
        return False
    import gc
    import os

    gc.disable()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    return True


def script() -> None:
    """The ``metis`` console script: :func:`main`, then the process ends without Python's tear-down.

    Python's exit frees every module one by one: 0.6-0.8 s at load 10 once the library, psycopg,
    numpy and pydantic are imported (``benchmarks/cli_startup.py --phases``, issue 25), for a
    process that is ending anyway. The exit handlers still run (the embedded server's, the search
    counts', the model workers', logging's) and stdout and stderr are flushed first; with a thread
    still running (not a daemon) the ordinary exit waits for it as always. :func:`main` alone (the
    tests call it in their own process) ends with ``SystemExit`` as before. A command of
    :data:`ONE_SHOT` runs in a process set up by :func:`one_shot_process`.
    """
    one_shot_process()
    try:
        main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    _exit_now(code)


def _exit_now(code: object) -> None:
    import atexit
    import os
    import threading

    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # as Python's own exit: the message on stderr, status 1
        sys.stderr.write(f"{code}\n")
        status = 1
    atexit._run_exitfuncs()  # what Python's exit runs first (CPython; multiprocessing's children use it too)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can reach the reader
            pass
    os._exit(status)
