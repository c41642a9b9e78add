"""Results per document (issue 25, item 4): each document once, at its best passage, with how many
of its passages matched; ``--files`` implies it. Through the CLI, the Python API and HTTP."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from cli_runner import run_cli
from corpus import write_corpus
from metis_pg import service

SECTION = ("## Vacuum part {i}\n\nVACUUM FULL rewrites the table {i} into a new file and takes an exclusive lock "
           "while it runs. " + "Plain vacuum marks dead rows reusable without the lock. " * 14 + "\n\n")
CORPUS = {
    "maintenance.md": "# Maintenance\n\n" + "".join(SECTION.format(i=i) for i in range(6)),
    "locks.md": "# Locks\n\nAn exclusive lock blocks readers; vacuum full needs one.\n",
    "backup.md": "# Backup\n\nRun a base backup before a vacuum full of a big table.\n",
    "tuning.md": "# Tuning\n\nAutovacuum settings: vacuum cost limit and naptime.\n",
}


@pytest.fixture()
def indexed(dsn, base_name, tmp_path: Path) -> str:
    result = run_cli("index", str(write_corpus(tmp_path / "kb", CORPUS)), "--base", base_name, "--dsn", dsn)
    assert result.code == 0, result.stderr
    return base_name


def test_by_passage_one_document_fills_the_answer(metis, indexed):
    """What the issue saw: the best passages are all of one document (the test would pass for nothing else)."""
    documents = [r.citation.document for r in metis.search(indexed, "vacuum full exclusive lock", top_k=3).results]
    assert documents.count("maintenance.md") >= 2


def test_files_prints_top_k_documents_each_once(dsn, indexed):
    result = run_cli("search", indexed, "vacuum", "full", "exclusive", "lock", "--files", "-n", "3", "--dsn", dsn)
    assert result.code == 0, result.stderr
    files = result.stdout.split()
    assert len(files) == 3 == len(set(files)) and "maintenance.md" in files


def test_per_document_json_and_text(dsn, metis, indexed):
    data = run_cli("search", indexed, "vacuum full exclusive lock", "--per-document", "-n", "4", "--json",
                   "--dsn", dsn).json()
    assert data["per_document"] is True
    documents = [r["citation"]["document"] for r in data["results"]]
    assert sorted(documents) == sorted(CORPUS)
    counts = {r["citation"]["document"]: r["passages"] for r in data["results"]}
    assert counts["maintenance.md"] == metis.base(indexed).chunks - 3 >= 6 and counts["locks.md"] == 1
    # Each document at its best passage: the first passage of it a plain search ranks.
    plain = metis.search(indexed, "vacuum full exclusive lock", top_k=20).results
    best = next(r for r in plain if r.citation.document == "maintenance.md")
    assert next(r["chunk_id"] for r in data["results"] if r["citation"]["document"] == "maintenance.md") == \
        best.chunk_id
    text = run_cli("search", indexed, "vacuum full exclusive lock", "-d", "-n", "4", "--dsn", dsn).stdout
    assert f"({counts['maintenance.md']} passages)" in text and "(1 passage)" in text and " · per document" in text


def test_per_document_over_http(metis, indexed):
    token = "test-token-" + "7" * 24
    with service.running(service.create_app(metis, tokens=[token])) as url:
        answer = httpx.post(f"{url}/search", headers={"Authorization": f"Bearer {token}"}, timeout=60,
                            json={"bases": indexed, "question": "vacuum full exclusive lock", "top_k": 2,
                                  "per_document": True}).json()
    assert answer["per_document"] is True and len(answer["results"]) == 2
    assert len({r["citation"]["document"] for r in answer["results"]}) == 2
    assert all(r["passages"] >= 1 for r in answer["results"])
