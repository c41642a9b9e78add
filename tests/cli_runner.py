"""Run the ``metis`` command in-process, through its real entry point (not a test module).

:func:`run_cli` calls :func:`metis_pg.cli.main` — the function the ``metis``
console script runs, where errors become exit codes — with ``sys.argv`` set,
and captures what it prints. :func:`run_script` runs the installed console
script in a subprocess, for the few tests that must see a real process.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metis_pg import cli

#: The console script installed next to this interpreter (``pip install -e .``).
METIS_SCRIPT = Path(sys.executable).with_name("metis")


@dataclass(frozen=True)
class CliResult:
    """Exit code and printed text of one ``metis`` run."""

    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def run_cli(*args: str) -> CliResult:
    """Run ``metis *args`` in this process; return its exit code and output."""
    stdout, stderr = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["metis", *args]
    try:
        with redirect_stdout(stdout), redirect_stderr(stderr):
            try:
                cli.main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = argv
    return CliResult(code, stdout.getvalue(), stderr.getvalue())


def run_script(*args: str, timeout_s: float = 120) -> CliResult:
    """Run the installed ``metis`` console script in a subprocess (a narrow terminal: COLUMNS=60)."""
    assert METIS_SCRIPT.exists(), f"the metis console script is not installed at {METIS_SCRIPT}"
    env = {**os.environ, "COLUMNS": "60"}
    done = subprocess.run([str(METIS_SCRIPT), *args], capture_output=True, text=True, timeout=timeout_s, env=env)
    return CliResult(done.returncode, done.stdout, done.stderr)
