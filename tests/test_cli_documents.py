"""``metis index`` with no path (re-index), ``metis get``, ``metis ls`` and the output formats (issue 15).

Runs the real entry point in this process (:func:`cli_runner.run_cli`) against the test database.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from cli_runner import run_cli

LEAVE = """# Handbook

## Leave policy

### Vacation

Full-time staff get 25 days of paid vacation per calendar year.
Ask with [the leave form](forms/leave.pdf) two weeks ahead.

## Expenses

Keep every receipt and file it within 30 days.
"""

ROUTER = "Reset the router using the red button for ten seconds."


@pytest.fixture()
def kb(tmp_path: Path) -> Path:
    folder = tmp_path / "kb"
    (folder / "guide").mkdir(parents=True)
    (folder / "guide" / "leave.md").write_text(LEAVE, encoding="utf-8")
    (folder / "router.txt").write_text(ROUTER, encoding="utf-8")
    return folder


@pytest.fixture()
def indexed(dsn, base_name, kb) -> str:
    result = run_cli("index", str(kb), "--base", base_name, "--dsn", dsn)
    assert result.code == 0, result.stderr
    return base_name


def bases(dsn) -> list[str]:
    return [b["name"] for b in run_cli("base", "list", "--json", "--dsn", dsn).json()]


# -- index with no path: every source again --------------------------------------------


def test_index_with_only_base_reads_every_source_again(dsn, indexed, kb, tmp_path):
    other = tmp_path / "notes"
    other.mkdir()
    (other / "lamp.md").write_text("# Lamp\n\nThe lamp oil is in the shed.\n", encoding="utf-8")
    assert run_cli("index", str(other), "--base", indexed, "--dsn", dsn).code == 0
    (kb / "router.txt").write_text(ROUTER + " Then wait a minute.", encoding="utf-8")
    (kb / "new.md").write_text("# New\n\nA new page about printers.\n", encoding="utf-8")
    (kb / "guide" / "leave.md").unlink()
    (other / "lamp.md").write_text("# Lamp\n\nThe lamp oil is in the cellar.\n", encoding="utf-8")

    result = run_cli("index", "--base", indexed, "--json", "--dsn", dsn)
    assert result.code == 0, result.stderr
    reports = {r["source"]: r for r in result.json()}
    assert set(reports) == {"kb", "notes"}
    kb_report = reports["kb"]
    assert (kb_report["new"], kb_report["changed"], kb_report["deleted"], kb_report["unchanged"]) == (1, 1, 1, 0)
    assert kb_report["folder"] == str(kb.resolve())
    assert (reports["notes"]["changed"], reports["notes"]["new"]) == (1, 0)

    human = run_cli("index", "--base", indexed, "--dsn", dsn)
    assert human.code == 0, human.stderr
    assert f"source kb ({kb.resolve()})" in human.stdout
    assert f"{indexed}: 0 read (0 new, 0 changed), 2 unchanged, 0 deleted" in human.stdout


def test_index_all_reads_every_base_again(dsn, indexed, kb, metis, base_name):
    other = f"{base_name}-2"
    assert run_cli("index", str(kb / "guide"), "--base", other, "--dsn", dsn).code == 0
    try:
        (kb / "guide" / "extra.md").write_text("# Extra\n\nMore leave rules.\n", encoding="utf-8")
        result = run_cli("index", "--all", "--json", "--dsn", dsn)
        assert result.code == 0, result.stderr
        mine = {(r["base"], r["source"]): r["new"] for r in result.json() if r["base"] in (indexed, other)}
        assert mine == {(indexed, "kb"): 1, (other, "guide"): 1}
    finally:
        metis.drop_base(other)


def test_index_again_keeps_the_documents_of_a_folder_that_is_gone(dsn, indexed, kb):
    shutil.rmtree(kb / "guide")
    kb.rename(kb.with_name("moved"))
    result = run_cli("index", "--base", indexed, "--json", "--dsn", dsn)
    assert result.code == 0, result.stderr
    [report] = result.json()
    assert "not read again: no such file or folder" in report["warnings"][0]
    assert "its 2 documents are kept" in report["warnings"][0]
    assert [b["documents"] for b in run_cli("status", indexed, "--json", "--dsn", dsn).json()] == [2]


def test_index_needs_a_base_or_all(dsn, kb, base_name):
    assert run_cli("index", str(kb), "--dsn", dsn).code == 2
    both = run_cli("index", "--all", "--base", base_name, "--dsn", dsn)
    assert both.code == 2 and "--all" in both.stderr
    assert run_cli("base", "create", base_name, "--dsn", dsn).code == 0
    empty = run_cli("index", "--base", base_name, "--dsn", dsn)
    assert empty.code == 2 and "has no folder to index again" in empty.stderr


def test_a_failed_index_leaves_no_empty_base(dsn, base_name, tmp_path):
    result = run_cli("index", str(tmp_path / "nowhere"), "--base", base_name, "--dsn", dsn)
    assert result.code == 2 and "no such file or folder" in result.stderr
    assert base_name not in bases(dsn)
    # A base that existed before the failed run is kept, empty or not.
    assert run_cli("base", "create", base_name, "--dsn", dsn).code == 0
    assert run_cli("index", str(tmp_path / "nowhere"), "--base", base_name, "--dsn", dsn).code == 2
    assert base_name in bases(dsn)


# -- get and ls ---------------------------------------------------------------------------


def test_ls_lists_path_kind_chunks_indexed_at_and_source(dsn, indexed):
    result = run_cli("ls", indexed, "--dsn", dsn)
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[:4] for line in lines] == [["guide/leave.md", "md", "2", "chunks"],
                                                    ["router.txt", "txt", "1", "chunks"]]
    assert all(line.endswith("  kb") for line in lines)
    as_json = run_cli("ls", indexed, "guide/", "--json", "--dsn", dsn).json()
    assert [(d["document"], d["kind"], d["chunks"], d["source"]) for d in as_json] == [("guide/leave.md", "md", 2, "kb")]
    assert as_json[0]["indexed_at"][:4].isdigit() and as_json[0]["size_bytes"] == len(LEAVE.encode())
    none = run_cli("ls", indexed, "nothing/", "--dsn", dsn)
    assert none.code == 0 and none.stdout.strip() == "no documents starting with 'nothing/'"


def test_get_prints_a_document_and_the_chunk_a_search_cites(dsn, metis, indexed):
    whole = run_cli("get", indexed, "guide/leave.md", "--dsn", dsn)
    assert whole.code == 0, whole.stderr
    lines = whole.stdout.splitlines()
    assert lines[0] == f"{indexed} · guide/leave.md · Handbook"
    assert lines[1].startswith("source kb · md · 2 chunks · indexed ")
    assert "Full-time staff get 25 days" in whole.stdout and "Keep every receipt" in whole.stdout

    cited = metis.search(indexed, "paid vacation days", top_k=1).results[0].citation
    assert cited.document == "guide/leave.md"
    at_line = run_cli("get", indexed, cited.location(), "--json", "--dsn", dsn)
    assert at_line.code == 0, at_line.stderr
    [doc] = at_line.json()
    assert doc["citation"] == cited.location() and doc["whole"] is False
    assert "25 days of paid vacation" in doc["text"] and "receipt" not in doc["text"]
    assert doc["chunks"][0]["headings"][-1] == "Vacation"
    # A line inside the chunk gives the same chunk.
    inside = run_cli("get", indexed, f"guide/leave.md:{cited.line + 1}", "--json", "--dsn", dsn).json()
    assert inside[0]["chunks"] == doc["chunks"]
    human = run_cli("get", indexed, cited.location(), "--dsn", dsn)
    assert human.stdout.splitlines()[0] == f"{indexed} · {cited.location()} · Handbook > Leave policy > Vacation"
    assert human.stdout.splitlines()[1].startswith("source kb · md · chunk 1 of 2 · ")


def test_get_several_documents_a_glob_and_max_bytes(dsn, indexed):
    result = run_cli("get", indexed, "*.txt", "guide/*", "--json", "--dsn", dsn)
    assert result.code == 0, result.stderr
    assert [d["document"] for d in result.json()] == ["router.txt", "guide/leave.md"]
    cut = run_cli("get", indexed, "router.txt", "--max-bytes", "9", "--dsn", dsn)
    assert cut.code == 0
    assert "\nReset the\n" in cut.stdout
    assert cut.stdout.rstrip().endswith(f"… cut at 9 of {len(ROUTER)} bytes (--max-bytes)")
    cut_json = run_cli("get", indexed, "router.txt", "--max-bytes", "9", "--json", "--dsn", dsn).json()[0]
    assert (cut_json["text"], cut_json["truncated"], cut_json["bytes"]) == ("Reset the", True, len(ROUTER))


def test_get_an_unknown_document_names_close_ones_and_exits_4(dsn, indexed):
    result = run_cli("get", indexed, "guide/leav.md", "--dsn", dsn)
    assert result.code == 4
    assert result.stderr.strip() == (f"error [NOT_FOUND]: no document of base {indexed!r} is 'guide/leav.md' "
                                     "(close: guide/leave.md)")
    glob = run_cli("get", indexed, "*.pdf", "--json", "--dsn", dsn)
    assert glob.code == 4 and glob.json()["error"]["code"] == "NOT_FOUND"
    line = run_cli("get", indexed, "router.txt:p2", "--dsn", dsn)
    assert line.code == 4 and "router.txt has no page 2 that was indexed (1 chunks, lines 1-1)" in line.stderr
