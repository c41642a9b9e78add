"""``metis index`` with no path (re-index), ``metis get``, ``metis ls`` and the output formats (issue 15).

Runs the real entry point in this process (:func:`cli_runner.run_cli`) against the test database.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from cli_runner import run_cli
from corpus import LEAVE, ROUTER, write_handbook


@pytest.fixture()
def kb(tmp_path: Path) -> Path:
    return write_handbook(tmp_path / "kb")


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


def test_index_again_reads_a_single_file_source_file_by_file_not_its_folder(dsn, base_name, tmp_path):
    # `metis index notes/todo.md` makes source `notes`; re-indexing must not pull in the rest of `notes/`.
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.md").write_text("# Todo\n\nOil the lamp.\n", encoding="utf-8")
    (notes / "private.md").write_text("# Private\n\nNot for the base.\n", encoding="utf-8")
    assert run_cli("index", str(notes / "todo.md"), "--base", base_name, "--dsn", dsn).code == 0
    (notes / "later.md").write_text("# Later\n\nAlso not for the base.\n", encoding="utf-8")
    (notes / "todo.md").write_text("# Todo\n\nOil the lamp and the door.\n", encoding="utf-8")

    result = run_cli("index", "--base", base_name, "--json", "--dsn", dsn)
    assert result.code == 0, result.stderr
    [report] = result.json()
    assert (report["new"], report["changed"], report["deleted"]) == (0, 1, 0)
    listed = lambda: [d["document"] for d in run_cli("ls", base_name, "--json", "--dsn", dsn).json()]  # noqa: E731
    assert listed() == ["todo.md"]

    (notes / "todo.md").unlink()  # gone from disk: kept, and said so
    [report] = run_cli("index", "--base", base_name, "--json", "--dsn", dsn).json()
    assert any("todo.md: no longer a file: its document is kept" in w for w in report["warnings"])
    assert listed() == ["todo.md"]

    # Once the folder itself is indexed, re-indexing reads it whole.
    assert run_cli("index", str(notes), "--base", base_name, "--dsn", dsn).code == 0
    (notes / "newest.md").write_text("# Newest\n\nA new page.\n", encoding="utf-8")
    [report] = run_cli("index", "--base", base_name, "--json", "--dsn", dsn).json()
    assert report["new"] == 1
    assert listed() == ["later.md", "newest.md", "private.md"]


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


def test_index_into_a_new_base_says_it_creates_it(dsn, indexed, kb, base_name, metis):
    typo = f"{base_name}-typo"
    try:
        result = run_cli("index", str(kb), "--base", typo, "--dsn", dsn)
        assert result.code == 0, result.stderr
        assert f"created base {typo!r} with the defaults (other bases: " in result.stderr
        assert indexed in result.stderr
        again = run_cli("index", str(kb), "--base", typo, "--dsn", dsn)
        assert "created base" not in again.stderr
    finally:
        metis.drop_base(typo)


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
    assert line.code == 4 and "router.txt (source kb) has no page 2 that was indexed (1 chunks, lines 1-1)" in line.stderr
    past = run_cli("get", indexed, "guide/leave.md:99999", "--dsn", dsn)  # not its last chunk, silently
    assert past.code == 4 and "guide/leave.md (source kb) has no line 99999 that was indexed" in past.stderr


def test_get_a_line_of_a_path_two_sources_hold_reads_the_one_that_has_it(dsn, indexed, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "router.txt").write_text("\n".join(f"line {i} of the other router notes." for i in range(1, 41)),
                                      encoding="utf-8")
    assert run_cli("index", str(other), "--base", indexed, "--dsn", dsn).code == 0
    result = run_cli("get", indexed, "router.txt:30", "--json", "--dsn", dsn)
    assert result.code == 0, result.stderr
    [doc] = result.json()["documents"] if isinstance(result.json(), dict) else result.json()
    assert doc["source"] == "other" and "line 30 of the other" in doc["text"]


def test_a_line_longer_than_a_chunk_is_cited_and_read_back_by_column(dsn, metis, base_name, tmp_path):
    """A text file of one 20,000-character line is 17 chunks that all start on line 1: each was cited
    `long.txt:1` and `metis get long.txt:1` gave the last. A chunk starting inside the line is cited
    `long.txt:1:COLUMN`, and get gives that chunk; `long.txt:1` is the line's first chunk."""
    import hash_embedder

    words = [f"w{i:05d}" for i in range(2857)]
    words[2000] = "zanzibar"  # one word only one chunk, far into the line
    line = " ".join(words)
    folder = tmp_path / "one-line"
    folder.mkdir()
    (folder / "long.txt").write_text(line, encoding="utf-8")
    (folder / "short.md").write_text("# Short\n\nA normal file about zanzibar.\n", encoding="utf-8")
    with hash_embedder.serve() as url:
        metis.create_base(base_name, embedding_model=hash_embedder.MODEL, embedding_url=url,
                          embedding_dim=hash_embedder.DIM)
        assert run_cli("index", str(folder), "--base", base_name, "--dsn", dsn).code == 0

    whole = run_cli("get", base_name, "long.txt", "--json", "--dsn", dsn).json()[0]
    chunks = whole["chunks"]
    assert len(chunks) >= 17 and {c["line"] for c in chunks} == {1}
    assert "column" not in chunks[0] and [c["column"] for c in chunks[1:]] == [
        line.index(c["text"][:6]) + 1 for c in chunks[1:]]

    found = run_cli("search", base_name, "zanzibar", "--mode", "keyword", "--json", "--dsn", dsn).json()["results"]
    cited = {r["citation"]["document"]: r["citation"] for r in found}
    column = cited["long.txt"]["column"]  # where the snippet starts: at or before the word, in its chunk
    assert cited["long.txt"]["line"] == 1 and line.index("zanzibar") - 240 < column <= line.index("zanzibar") + 1
    assert line[column - 1:].startswith(cited["long.txt"]["snippet"].lstrip("…").split()[0])
    assert "column" not in cited["short.md"]  # a normal file is cited as before
    shown = run_cli("search", base_name, "zanzibar", "--mode", "keyword", "--dsn", dsn)
    assert f"long.txt:1:{column} · " in shown.stdout and "short.md:3 · " in shown.stdout

    at = run_cli("get", base_name, f"long.txt:1:{column}", "--json", "--dsn", dsn)
    assert at.code == 0, at.stderr
    [part] = at.json()
    assert "zanzibar" in part["text"] and len(part["chunks"]) == 1
    assert part["citation"] == f"long.txt:1:{part['chunks'][0]['column']}"
    first = run_cli("get", base_name, "long.txt:1", "--json", "--dsn", dsn).json()[0]
    assert first["chunks"] == chunks[:1] and first["citation"] == "long.txt:1"
    for c in chunks[1:]:  # every chunk's own citation reads it back
        assert run_cli("get", base_name, f"long.txt:1:{c['column']}", "--json", "--dsn", dsn).json()[0]["chunks"] == [c]
    zero = run_cli("get", base_name, "long.txt:1:0", "--dsn", dsn)
    assert zero.code != 0 and "columns are counted from 1" in zero.stderr


# -- output formats, --min-score, questions with no word ---------------------------------


def test_search_jsonl_csv_md_and_files(dsn, metis, indexed):
    want = metis.search(indexed, "paid vacation days", top_k=3)
    args = ("search", indexed, "paid vacation days", "--top-k", "3", "--dsn", dsn)

    jsonl = run_cli(*args, "--jsonl")
    assert jsonl.code == 0, jsonl.stderr
    rows = [json.loads(line) for line in jsonl.stdout.splitlines()]
    assert [r["rank"] for r in rows] == [1, 2, 3]
    assert [r["chunk_id"] for r in rows] == [r.chunk_id for r in want.results]
    assert rows[0]["citation"] == want.results[0].citation.to_dict()

    as_csv = run_cli(*args, "--csv")
    assert as_csv.code == 0, as_csv.stderr
    table = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert [(t["rank"], t["document"], t["line"]) for t in table] == [
        (str(i), r.citation.document, str(r.citation.line or "")) for i, r in enumerate(want.results, start=1)]
    assert table[0]["headings"] == " > ".join(want.results[0].citation.headings)
    assert (table[0]["line_start"], table[0]["line_end"]) == (
        str(want.results[0].citation.line_start), str(want.results[0].citation.line_end))
    assert float(table[0]["fused"]) == pytest.approx(want.results[0].scores.fused)

    md = run_cli(*args, "--md")
    assert md.code == 0, md.stderr
    first = want.results[0]
    assert md.stdout.startswith(f"1. **{first.citation.location()}** — Handbook > Leave policy > Vacation (score ")
    # The question's words that weigh in the base in bold (issue 25): "days" is in two of its three passages.
    assert "   > Full-time staff get 25 days of **paid** **vacation** per calendar year." in md.stdout

    files = run_cli(*args, "--files")
    assert files.code == 0, files.stderr
    assert files.stdout.splitlines() == list(dict.fromkeys(r.citation.document for r in want.results))

    both = run_cli(*args, "--csv", "--md")
    assert both.code == 2 and "choose one output format: --csv or --md" in both.stderr

    nothing = run_cli("search", indexed, "zyzzyva", "--mode", "keyword", "--md", "--dsn", dsn)
    assert nothing.code == 0 and nothing.stdout == "_no results_\n"
    error = run_cli("search", "no-such-base", "router", "--jsonl", "--dsn", dsn)  # one JSON line, as --jsonl says
    assert error.code == 4 and len(error.stdout.splitlines()) == 1
    assert json.loads(error.stdout)["error"]["code"] == "BASE_NOT_FOUND"


def test_ls_formats(dsn, indexed):
    files = run_cli("ls", indexed, "--files", "--dsn", dsn)
    assert files.stdout == "guide/leave.md\nrouter.txt\n"
    jsonl = [json.loads(line) for line in run_cli("ls", indexed, "--jsonl", "--dsn", dsn).stdout.splitlines()]
    assert [d["document"] for d in jsonl] == ["guide/leave.md", "router.txt"]
    table = list(csv.DictReader(io.StringIO(run_cli("ls", indexed, "--csv", "--dsn", dsn).stdout)))
    assert [(t["document"], t["kind"], t["chunks"]) for t in table] == [("guide/leave.md", "md", "2"),
                                                                         ("router.txt", "txt", "1")]
    md = run_cli("ls", indexed, "--md", "--dsn", dsn).stdout.splitlines()
    assert md[1].startswith("- `router.txt` — Reset the router using the red button for ten seconds. (txt, 1 chunks, source kb, indexed ")


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "dense"])
def test_min_score_cuts_on_the_score_that_orders_the_mode(dsn, metis, indexed, mode):
    answer = metis.search(indexed, "vacation receipts router", mode=mode, top_k=3)
    leg = {"hybrid": "fused", "keyword": "keyword", "dense": "dense"}[mode]
    scores = [r.scores.to_dict()[leg] for r in answer.results]
    assert len(scores) >= 2 and scores[0] > scores[-1]
    threshold = (scores[0] + scores[1]) / 2  # keeps the first only
    result = run_cli("search", indexed, "vacation receipts router", "--mode", mode, "--top-k", "3",
                     "--min-score", repr(threshold), "--json", "--dsn", dsn)
    assert result.code == 0, result.stderr
    assert [r["chunk_id"] for r in result.json()["results"]] == [answer.results[0].chunk_id]
    assert f"{len(scores) - 1} results scored below --min-score" in result.stderr
    human = run_cli("search", indexed, "vacation receipts router", "--mode", mode, "--top-k", "3",
                    "--min-score", repr(threshold), "--dsn", dsn)
    assert re.findall(r"^\d+\. ", human.stdout, re.MULTILINE) == ["1. "]


@pytest.mark.parametrize("question", ["?!", "...", " --- ", "¿?"])
def test_a_question_with_no_word_warns_and_finds_nothing(dsn, indexed, question):
    result = run_cli("search", indexed, question, "--json", "--dsn", dsn)
    assert result.code == 0, result.stderr
    data = result.json()
    assert data["results"] == []
    assert [w["code"] for w in data["warnings"]] == ["NO_WORDS"]
    human = run_cli("search", indexed, question, "--dsn", dsn)
    assert human.stdout.splitlines()[0] == "no results"  # the warning is on stderr: stdout holds the results only
    assert human.stderr.splitlines() == [f"warning: {data['warnings'][0]['message']}"]
    # A question with one word is searched as usual.
    assert run_cli("search", indexed, "router?", "--json", "--dsn", dsn).json()["results"]


def test_compare_with_mode_is_refused(dsn, indexed):
    for mode in ("dense", "hybrid"):
        result = run_cli("search", indexed, "vacation", "--compare", "--mode", mode, "--dsn", dsn)
        assert result.code == 2
        assert result.stderr.strip() == (f"error [INVALID_REQUEST]: --compare asks all three modes "
                                         f"(hybrid, dense, keyword): drop --mode {mode}")
    assert run_cli("search", indexed, "vacation", "--compare", "--csv", "--dsn", dsn).code == 2
    assert run_cli("search", indexed, "vacation", "--compare", "--dsn", dsn).code == 0


def test_a_folder_inside_or_holding_another_source_is_refused(dsn, indexed, kb, base_name):
    # kb is source "kb": indexing kb/guide (or one file of it) as its own source would hold every
    # passage twice; so would indexing kb's parent.
    inside = run_cli("index", str(kb / "guide"), "--base", indexed, "--dsn", dsn)
    assert inside.code == 2
    assert (f"{(kb / 'guide').resolve()} is inside {kb.resolve()}, which source 'kb' of base {indexed!r} already"
            f" reads: index that folder again") in inside.stderr
    one_file = run_cli("index", str(kb / "guide" / "leave.md"), "--base", indexed, "--dsn", dsn)
    assert one_file.code == 2 and "which source 'kb'" in one_file.stderr
    holding = run_cli("index", str(kb.parent), "--base", indexed, "--dsn", dsn)
    assert holding.code == 2 and f"holds {kb.resolve()}, which source 'kb'" in holding.stderr
    assert [d["document"] for d in run_cli("ls", indexed, "--json", "--dsn", dsn).json()] == [
        "guide/leave.md", "router.txt"]
    same = run_cli("index", str(kb / "router.txt"), "--base", indexed, "--dsn", dsn)  # a file of kb itself: fine
    assert same.code == 0, same.stderr
