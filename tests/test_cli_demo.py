"""``metis demo``, the README's first command, run twice in a row, finished or interrupted (issue 25, item 1).

The demo indexes a folder (``docs/``) and a file beside it (``README.md``): two sources, one of a
whole folder and one of a single file of its parent folder. Run through the real entry point
(:func:`cli_runner.run_cli`) against the test database.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli_runner import run_cli
from corpus import LEAVE, ROUTER, write_corpus
from metis_pg import storage


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """A checkout as the demo reads it: docs/ (two documents) and README.md beside it."""
    root = tmp_path / "project"
    write_corpus(root, {"docs/guide/leave.md": LEAVE, "docs/router.txt": ROUTER,
                        "README.md": "# Project\n\nThe router is reset with the red button; leave is asked early.\n"})
    return root


def demo(project: Path, base: str, dsn: str):
    return run_cli("demo", str(project / "docs"), str(project / "README.md"), "--base", base, "-q", "router reset",
                   "--dsn", dsn)


def chunks_without_vector(metis, base: str) -> int:
    return metis.base(base).chunks_without_vector


def test_the_demo_runs_twice_in_a_row(dsn, metis, base_name, project):
    first = demo(project, base_name, dsn)
    assert first.code == 0, first.stderr
    assert re.search(r": 3 read \(3 new, 0 changed\), 0 unchanged", first.stdout), first.stdout
    again = demo(project, base_name, dsn)
    assert again.code == 0, again.stderr
    assert re.search(r": 0 read \(0 new, 0 changed\), 3 unchanged, 0 deleted, 0 failed · ", again.stdout), again.stdout
    assert "? router reset" in again.stdout and "router.txt" in again.stdout
    # `metis index --base B` reads both sources again, refusing neither.
    reread = run_cli("index", "--base", base_name, "--dsn", dsn)
    assert reread.code == 0, reread.stderr
    assert "not read again" not in reread.stdout and reread.stdout.count("source ") == 2, reread.stdout


def test_the_demo_interrupted_while_embedding_finishes_when_run_again(dsn, metis, base_name, project):
    assert demo(project, base_name, dsn).code == 0
    with metis.pool.connection() as conn:  # what Ctrl-C in the embedding phase leaves: chunks without a vector
        base_id = storage.get_base(conn, base_name).base_id
        conn.execute("DELETE FROM embeddings WHERE chunk_id IN (SELECT chunk_id FROM chunks WHERE base_id = %s"
                     " ORDER BY chunk_id DESC LIMIT 2)", (base_id,))
    assert chunks_without_vector(metis, base_name) == 2
    again = demo(project, base_name, dsn)
    assert again.code == 0, again.stderr
    assert "0 chunks, 2 embedded · ready" in again.stdout, again.stdout
    assert chunks_without_vector(metis, base_name) == 0


def test_a_refusal_gives_a_command_that_works(dsn, base_name, project):
    assert run_cli("index", str(project / "docs"), "--base", base_name, "--dsn", dsn).code == 0
    nested = run_cli("index", str(project / "docs" / "guide"), "--base", base_name, "--dsn", dsn)
    assert nested.code == 2
    advice = re.search(r"\(metis index (\S+) --base (\S+); unchanged files are skipped\)", nested.stderr)
    assert advice, nested.stderr
    folder, base = advice.groups()
    assert (Path(folder), base) == (project.resolve() / "docs", base_name)
    followed = run_cli("index", folder, "--base", base, "--dsn", dsn)
    assert followed.code == 0, followed.stderr
    # A file of the folder a single-file source reads, under another name: refused, with the command that works.
    assert run_cli("index", str(project / "README.md"), "--base", base_name, "--dsn", dsn).code == 0
    twice = run_cli("index", str(project / "README.md"), "--base", base_name, "--source", "other", "--dsn", dsn)
    assert twice.code == 2, twice.stdout
    advice = re.search(r"\((metis index .*)\)$", twice.stderr.strip())
    assert advice, twice.stderr
    args = advice.group(1).split()[1:]
    followed = run_cli(*args, "--dsn", dsn)
    assert followed.code == 0, followed.stderr
    assert " 1 unchanged" in followed.stdout, followed.stdout


def test_the_demo_of_another_checkout_in_the_same_home_is_taken_over(dsn, metis, base_name, tmp_path):
    """Two clones named alike, one METIS_HOME: the second clone's demo must run, not refuse."""
    first, second = (write_corpus(tmp_path / side / "metis_pg", {
        "docs/guide/leave.md": LEAVE, "docs/router.txt": ROUTER,
        "README.md": f"# Project\n\nThe {side} clone resets the router with the red button.\n"}) for side in ("a", "b"))
    assert demo(first, base_name, dsn).code == 0
    taken = demo(second, base_name, dsn)
    assert taken.code == 0, taken.stderr
    assert f"held the demo of {first.resolve()}: dropped, indexing it again from {second.resolve()}" \
        f" (metis demo PATH --base NAME keeps both)" in taken.stderr
    assert {s.root for s in metis.sources(base_name)} == {str(second.resolve()), str(second.resolve() / "docs")}
    assert demo(second, base_name, dsn).code == 0  # and again
    # A base holding something else is refused, with a command that works.
    assert run_cli("note", "add", base_name, "--title", "mine", "keep me", "--dsn", dsn).code == 0
    refused = demo(first, base_name, dsn)
    assert refused.code == 2 and f"metis demo --base {base_name}-2" in refused.stderr
