"""Reading and chunking are linear in the file's size (issue 13, class 2).

Each input is about 1 MB of what made a reader or the chunker quadratic (or
worse) before: it must be read and chunked "at all" within a generous bound.
Measured figures are printed by ``benchmarks/pathological_inputs.py``; these
tests only catch a return of the quadratic cases (a 60 KB heading line took 40 s,
40,000 fences 104 s, 80 KB of ``<a `` 77 s).

The per-file time budget (``file_time_budget_s``) is tested here on the readers
and in test_bad_input.py through an index run.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from raw_files import docx_bytes

from metis_pg.chunking import chunk_document
from metis_pg.readers import TimeBudgetExceeded, read_document, time_budget

MB = 1_000_000
#: Seconds a ~1 MB pathological input may take to be read and chunked. Generous: the
#: slowest (HTML tag soup, parsed in pure Python) takes ~3 s on a quiet machine,
#: 12 s at load 7 on 2 cores; the quadratic cases took minutes to hours.
BOUND_S = 60.0


#: name → (file name, bytes). About 1 MB each (the docx: 100,000 paragraphs).
CASES = {
    # Markdown: regex backtracking on heading lines.
    "heading line of spaces, 60 KB": ("h.md", b"# a" + b" " * 60_000 + b"{"),
    "heading line of spaces": ("h.md", b"# a" + b" " * MB + b"x {"),
    "heading line of spaces and hashes": ("h.md", b"#" + b" #" * (MB // 2) + b" x"),
    "many headings": ("h.md", b"## Part\n\nSome text.\n\n" * (MB // 24)),
    "setext paragraph": ("h.md", b"a line of text\n" * (MB // 15) + b"===\n"),
    # Chunking: every blank line scanned every fence.
    "40,000 fenced blocks": ("f.md", b"```\ncode\n```\n\ntext\n\n" * 40_000 + b"x" * (MB - 800_000)),
    "unclosed fence of blank lines": ("f.md", b"```\n" + b"x\n\n" * (MB // 3)),
    "long line without spaces": ("l.md", b"x" * MB),
    "text without a newline": ("t.txt", b"word " * (MB // 5)),
    "sentences without newlines": ("t.txt", b"Yes. " * (MB // 5)),
    "markdown table": ("t.md", b"| a | b | c |\n" * (MB // 14)),
    # HTML: html.parser rescanned to the end from each unclosable tag; cells re-joined per cell.
    "unclosed <b> nesting": ("b.html", b"<b>x" * (MB // 4)),
    "unclosed <div> nesting": ("d.html", b"<div>x" * (MB // 6)),
    "unclosable '<a ' soup": ("a.html", b"<a " * (MB // 3)),
    "unclosable '<a ' soup ending in >": ("a.html", b"<a\n" * (MB // 3) + b">"),
    "unclosed comments": ("c.html", b"<!--" * (MB // 4)),
    "one table row of 100,000 cells": ("t.html", b"<table><tr>" + b"<td>x</td>" * (MB // 10) + b"</tr></table>"),
    "many headings and paragraphs": ("h.html", b"<h2>x</h2><p>y</p>" * (MB // 18)),
    # HTML: each header, footer and heading looked at its ancestors (article? scope?).
    "unclosed <header> nesting in an article": ("hd.html", b"<article>" + b"<header>x" * (MB // 9)),
    "headings under deep nesting": ("hn.html", b"<div>" * 50_000 + b"<h2>x</h2><p>y" * 40_000),
    "page headers nested around one heading": ("hh.html", b'<div class="header">' * 30_000 + b"<h2>x</h2>"),
    # docx: each paragraph re-copied the section's text so far.
    "docx of 100,000 paragraphs": ("p.docx", docx_bytes(100_000)),
    "docx table merged down 5,000 rows": ("m.docx", docx_bytes(0, merged_rows=5_000)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_pathological_input_is_read_and_chunked_in_linear_time(tmp_path: Path, name: str):
    file_name, data = CASES[name]
    path = tmp_path / file_name
    path.write_bytes(data)

    started = time.perf_counter()
    doc = read_document(path)
    chunks = chunk_document(doc, chunk_size=1200)
    seconds = time.perf_counter() - started

    assert seconds < BOUND_S, f"{name}: {seconds:.1f} s"
    assert all(doc.text[c.char_start : c.char_end] == c.text and len(c.text) <= 1200 for c in chunks)


def test_heading_line_of_spaces_is_still_a_heading_with_its_attributes_dropped(tmp_path: Path):
    path = tmp_path / "h.md"
    path.write_bytes(b"# Leave  " + b" " * 100_000 + b"{ #leave }\n\nTwenty-five days.\n")

    doc = read_document(path)

    assert doc.title == "Leave"
    assert [s.headings for s in doc.sections] == [("Leave",)]


def test_docx_paragraphs_of_one_section_are_one_section(tmp_path: Path):
    path = tmp_path / "p.docx"
    path.write_bytes(docx_bytes(20_000))

    doc = read_document(path)

    assert len(doc.sections) == 1
    assert doc.sections[0].text.count("\n\n") == 19_999
    assert doc.text[doc.sections[0].char_start :] == doc.sections[0].text


def test_docx_cell_merged_down_many_rows_is_read_on_each_row(tmp_path: Path):
    path = tmp_path / "m.docx"
    path.write_bytes(docx_bytes(1, merged_rows=3_000))  # python-docx recursed once per row above

    doc = read_document(path)

    assert doc.text.split("\n\n")[1:4] == ["Merged | row 0", "Merged | row 1", "Merged | row 2"]
    assert doc.text.endswith("Merged | row 2999")


def test_table_cells_of_one_row_are_joined_by_bars(tmp_path: Path):
    path = tmp_path / "t.html"
    path.write_bytes(b"<table><tr><td> </td><td>a</td><td></td><td>b</td></tr></table>")

    assert read_document(path).text == "a | | b"


def test_unclosed_comment_and_unclosable_tag_at_the_end_are_text(tmp_path: Path):
    path = tmp_path / "c.html"
    path.write_bytes(b"<p>Kept paragraph.</p><p>Also kept <a x</p> tail <b y")
    comment = tmp_path / "d.html"
    comment.write_bytes(b"<p>Before.</p><!-- <p>commented out</p> never closed")

    assert read_document(path).text == "Kept paragraph.\n\nAlso kept tail <b y"
    assert read_document(comment).text == "Before.\n\n<!--\n\ncommented out\n\nnever closed"


@pytest.mark.parametrize(
    ("file_name", "data"),
    [
        ("slow.md", b"# Part\n\nSome words here.\n\n" * 200_000),
        ("slow.txt", b"Yes. " * 1_000_000),
        ("slow.html", b"<p>x" * 200_000),
        ("slow.docx", docx_bytes(50_000)),
    ],
)
def test_reading_past_the_time_budget_stops_with_the_reason(tmp_path: Path, file_name: str, data: bytes):
    path = tmp_path / file_name
    path.write_bytes(data)

    started = time.perf_counter()
    # Only the base budget: the 3 s per MB a file earns (issue 26) is tested in test_hostile_files.py.
    with pytest.raises(TimeBudgetExceeded) as caught, time_budget(0.05, str(path), per_mb_s=0, per_page_s=0):
        chunk_document(read_document(path))
    seconds = time.perf_counter() - started

    assert caught.value.message == f"{path}: took longer than 0.05 s to read: skipped"
    assert seconds < BOUND_S


def test_no_time_budget_outside_the_block_and_none_means_unbounded(tmp_path: Path):
    path = tmp_path / "slow.md"
    path.write_bytes(b"# Part\n\nSome words here.\n\n" * 20_000)
    with time_budget(None, str(path)):
        assert chunk_document(read_document(path))
    assert chunk_document(read_document(path))
