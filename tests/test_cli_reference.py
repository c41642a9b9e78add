"""docs/cli.md is the command reference generated from ``metis --help`` (issue 15), and it is current.

Like sqlite-utils' ``cog --check``: after changing a command, run ``python -m metis_pg.cli_reference``.
"""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from cli_runner import run_cli
from metis_pg.cli import app
from metis_pg.cli_reference import DOC_PATH, reference, write

ROOT = Path(__file__).resolve().parents[1]


def test_docs_cli_md_is_current():
    assert DOC_PATH == ROOT / "docs" / "cli.md"
    assert DOC_PATH.read_text(encoding="utf-8") == reference(), (
        "docs/cli.md is not what `metis --help` says: run `python -m metis_pg.cli_reference`")


def test_the_reference_holds_every_command_and_its_help():
    text = reference()
    root = typer.main.get_command(app)
    for name in root.commands:
        group = root.commands[name]
        assert f"## `metis {name}`" in text, name
        for sub in getattr(group, "commands", {}):
            assert f"## `metis {name} {sub}`" in text, f"{name} {sub}"
    # Each section is the command's --help (here 100 columns wide, there the terminal's).
    search = text.split("## `metis search`", 1)[1].split("\n## ", 1)[0]
    assert "Usage: metis search [OPTIONS] {words}..." in search
    assert re.search(r"^  --jsonl +Print one JSON object per line", search, re.MULTILINE)
    assert "  --min-score <float>" in search and "  --min-score <float>" in run_cli("search", "--help").stdout


def test_write_reports_a_stale_file_and_rewrites_it(tmp_path):
    stale = tmp_path / "cli.md"
    stale.write_text("# old\n", encoding="utf-8")
    assert write(stale) is True and stale.read_text(encoding="utf-8") == reference()
    assert write(stale) is False


def test_readme_links_the_reference():
    assert "[docs/cli.md](docs/cli.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
