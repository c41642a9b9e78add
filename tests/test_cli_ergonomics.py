"""``metis`` as gno and qmd users type it (issue 25, item 5): a search of every base, unquoted words,
``-n``, a closed pipe, ``base drop`` asking first, and no RuntimeDirWarning on stderr."""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from cli_runner import METIS_SCRIPT, run_cli
from corpus import write_corpus, write_handbook


@pytest.fixture()
def indexed(dsn, base_name, tmp_path) -> str:
    result = run_cli("index", str(write_handbook(tmp_path / "kb")), "--base", base_name, "--dsn", dsn)
    assert result.code == 0, result.stderr
    return base_name


def chunk_ids(data: dict) -> list[int]:
    return [r["chunk_id"] for r in data["results"]]


def test_a_question_alone_is_asked_of_every_base(dsn, metis, indexed):
    result = run_cli("search", "how many vacation days", "--json", "--dsn", dsn)
    assert result.code == 0, result.stderr
    data = result.json()
    assert set(data["bases"]) == set(metis.base_names()) and indexed in data["bases"]
    best = next(r for r in data["results"] if r["base"] == indexed)
    assert best["citation"]["document"] == "guide/leave.md"


def test_unquoted_words_are_one_question_and_n_is_top_k(dsn, metis, indexed):
    unquoted = run_cli("search", indexed, "how", "many", "vacation", "days", "-n", "2", "--json", "--dsn", dsn)
    assert unquoted.code == 0, unquoted.stderr
    want = metis.search(indexed, "how many vacation days", top_k=2).to_dict()
    assert chunk_ids(unquoted.json()) == chunk_ids(want) and len(want["results"]) == 2
    # --base: every word is the question, the first too.
    named = run_cli("search", "--base", indexed, "router", "reset", "--json", "--dsn", dsn)
    assert chunk_ids(named.json()) == chunk_ids(metis.search(indexed, "router reset").to_dict())


def test_an_unknown_base_says_how_to_ask_every_base(dsn, indexed):
    result = run_cli("search", "no-such-base", "router", "--dsn", dsn)
    assert result.code == 4
    assert result.stderr.startswith("error [BASE_NOT_FOUND]: no base named 'no-such-base'")
    assert result.stderr.rstrip().endswith('to ask every base, quote the whole question: metis search '
                                           '"no-such-base router"')


@pytest.mark.parametrize("args", [["ls", "{base}"], ["ls", "{base}", "--files"],
                                  ["search", "{base}", "vacation", "--json"], ["search", "{base}", "vacation"]])
def test_a_closed_pipe_ends_quietly_with_exit_0(dsn, indexed, args):
    """`metis ls docs | head -1`: the reader is gone before metis writes; as for cat, exit 0 and nothing said."""
    command = [str(METIS_SCRIPT), *(a.format(base=indexed) for a in args), "--dsn", dsn]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    _, stderr = proc.communicate(timeout=120)
    assert (proc.returncode, stderr.decode()) == (0, "")


def test_base_drop_asks_on_a_terminal_and_needs_yes_without_one(dsn, metis, indexed):
    refused = run_cli("base", "drop", indexed, "--dsn", dsn)  # the tests' stdin is not a terminal
    assert refused.code == 2
    assert "deletes them for good: add --yes (no terminal to ask on)" in refused.stderr
    assert "2 documents and" in refused.stderr and indexed in metis.base_names()

    def on_a_terminal(answer: bytes) -> tuple[int, str]:
        leader, follower = pty.openpty()
        proc = subprocess.Popen([str(METIS_SCRIPT), "base", "drop", indexed, "--dsn", dsn], stdin=follower,
                                stdout=follower, stderr=follower, close_fds=True)
        os.close(follower)
        seen = b""
        deadline = time.monotonic() + 120
        while b"?" not in seen and time.monotonic() < deadline:
            seen += os.read(leader, 4096)
        os.write(leader, answer)
        code = proc.wait(timeout=120)
        try:
            while chunk := os.read(leader, 4096):
                seen += chunk
        except OSError:  # the terminal closes with the process
            pass
        os.close(leader)
        return code, seen.decode()

    code, screen = on_a_terminal(b"n\n")
    assert code == 0 and f"Delete base {indexed!r} with its 2 documents and" in screen and "kept base" in screen
    assert indexed in metis.base_names()
    code, screen = on_a_terminal(b"y\n")
    assert code == 0 and f"dropped base {indexed}" in screen, screen
    assert indexed not in metis.base_names()


def test_no_runtime_dir_warning_reaches_stderr(tmp_path):
    """platformdirs warns (two lines) about an XDG_RUNTIME_DIR that is not 0700: `2>&1 | jq` would break."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o755)
    runtime.chmod(0o755)
    home = Path(tempfile.mkdtemp(prefix="metis-test-xdg-", dir="/var/tmp"))  # a short socket path
    env = {**os.environ, "METIS_HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)}
    env.pop("METIS_DATABASE_URL", None)
    try:
        done = subprocess.run([str(METIS_SCRIPT), "db", "upgrade"], capture_output=True, text=True, env=env,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        assert done.stderr == "" and done.stdout.startswith("database at revision ")
    finally:
        subprocess.run([str(METIS_SCRIPT), "db", "stop", "--force"], capture_output=True, env=env, timeout=120)
        shutil.rmtree(home, ignore_errors=True)


def test_the_runtime_folder_made_when_xdg_runtime_dir_is_unset_is_private(tmp_path, monkeypatch):
    """A Python program that connects printed platformdirs' RuntimeDirWarning: metis made /tmp/runtime-<uid>
    with os.makedirs (0755 under the usual umask) and platformdirs then refuses it (not 0700)."""
    import warnings

    import platformdirs

    from metis_pg.db import embedded

    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    runtime = tmp_path / "runtime-me"
    monkeypatch.setattr(embedded, "_default_runtime_dir", lambda: runtime)
    old = os.umask(0o022)
    try:
        embedded.prepare_pgserver_import()
    finally:
        os.umask(old)
    assert os.environ["XDG_RUNTIME_DIR"] == str(runtime)
    assert runtime.stat().st_mode & 0o777 == 0o700
    assert (runtime / "python_PostgresServer").is_dir()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert platformdirs.user_runtime_path() == runtime
    assert not [w for w in caught if "XDG_RUNTIME_DIR" in str(w.message)], [str(w.message) for w in caught]
    runtime.chmod(0o755)  # left loose by an earlier version: tightened at the next start
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    embedded.prepare_pgserver_import()
    assert runtime.stat().st_mode & 0o777 == 0o700


VACUUM = {"maintenance.md": "# Vacuum\n\nVacuum reclaims the storage of dead rows in a table.\n",
          "old.md": "# Legacy vacuum\n\nOn legacy servers vacuum full locked the whole table.\n"}


def test_a_dash_word_typed_in_the_question_excludes_it_and_options_still_work(dsn, metis, base_name, tmp_path):
    # Issue 20 part 5: the CLI takes the -word exclusions of HTTP and MCP; Click took -legacy for options
    # ("No such option: -l", exit 2) and only `-- -legacy` worked.
    assert run_cli("index", str(write_corpus(tmp_path / "kb", VACUUM)), "--base", base_name, "--dsn", dsn).code == 0
    assert len(metis.search(base_name, "vacuum", mode="keyword").results) == 2
    want = [r.citation.document for r in metis.search(base_name, "vacuum -legacy", mode="keyword").results]
    assert want == ["maintenance.md"]
    for args in (["vacuum", "-legacy"],                                       # as gno/qmd users type it
                 ["-legacy", "vacuum"],                                       # the word first
                 ["vacuum", "-legacy", "-n", "5"], ["vacuum", "-n5", "-legacy"],  # -n, and -n with its value
                 ["vacuum", "-legacy", "--top-k", "5"], ["vacuum", "--top-k=5", "-legacy"]):
        result = run_cli("search", base_name, *args, "--mode", "keyword", "--json", "--dsn", dsn)
        assert result.code == 0, (args, result.stderr)
        assert [r["citation"]["document"] for r in result.json()["results"]] == want, args
    for args in (["--", base_name, "vacuum", "-legacy"], ["--", base_name, "-legacy vacuum"]):  # "--" as before
        result = run_cli("search", "--mode", "keyword", "--json", "--dsn", dsn, *args)
        assert result.code == 0, (args, result.stderr)
        assert [r["citation"]["document"] for r in result.json()["results"]] == want, args
    # An option's value is its value, even when it starts with "-"; --as and -b still read theirs.
    only = run_cli("search", "-b", base_name, "vacuum", "-legacy", "--as", "", "--mode", "keyword", "--json",
                   "--dsn", dsn)
    assert only.code == 0, only.stderr
    assert [r["citation"]["document"] for r in only.json()["results"]] == want
    # Hybrid (the bundled model) drops it too.
    hybrid = run_cli("search", base_name, "vacuum", "-legacy", "--json", "--dsn", dsn)
    assert hybrid.code == 0 and "old.md" not in [r["citation"]["document"] for r in hybrid.json()["results"]]
    # An unknown option is still refused (a one-letter word is no exclusion: terms have 2+ letters).
    refused = run_cli("search", base_name, "vacuum", "-x", "--dsn", dsn)
    assert refused.code == 2 and "No such option: -x" in refused.stderr
