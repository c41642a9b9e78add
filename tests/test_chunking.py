"""Chunking (SPEC F4): size limit, section boundaries, exact spans, lines and pages."""

from __future__ import annotations

from pathlib import Path

import pytest
from fpdf import FPDF

from metis_pg.chunking import Chunk, chunk_document, embedding_text
from metis_pg.errors import InvalidInput
from metis_pg.readers import read_document

# ../shared/data beside the checkout (read in place, never copied).
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
REAL_MARKDOWN = sorted(
    [
        *SHARED_DATA.glob("gno-bench-fixture/corpus/*.md"),
        *SHARED_DATA.glob("qmd-eval-docs/corpus/*.md"),
        *SHARED_DATA.glob("gno-fastapi-multilingual/corpus/*/*.md"),
    ]
)


def read(tmp_path: Path, name: str, content: str):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    return read_document(path)


# --- real files -----------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [200, 500, 1200])
def test_real_markdown_chunks_fit_the_size_and_point_at_their_source(chunk_size):
    assert len(REAL_MARKDOWN) == 41
    checked = 0
    for path in REAL_MARKDOWN:
        doc = read_document(path)
        source = path.read_text(encoding="utf-8")
        source_lines = source.split("\n")
        line_starts = [0] + [i + 1 for i, ch in enumerate(source) if ch == "\n"] + [len(source) + 1]
        chunks = chunk_document(doc, chunk_size=chunk_size)
        assert len(chunks) > 0
        assert [c.ordinal for c in chunks] == list(range(len(chunks)))
        for c in chunks:
            assert 0 < len(c.text) <= chunk_size
            assert c.text == c.text.strip()
            assert doc.text[c.char_start : c.char_end] == c.text
            assert source[c.char_start : c.char_end] == c.text
            # The chunk starts on line c.line of the file, exactly.
            assert line_starts[c.line - 1] <= c.char_start < line_starts[c.line]
            assert c.text.split("\n")[0] in source_lines[c.line - 1]
            # ... ends on line c.line_end, and each of its lines is where line_at says.
            assert line_starts[c.line_end - 1] <= c.char_end - 1 < line_starts[c.line_end]
            for offset in range(0, len(c.text), 97):
                at = c.line_at(offset)
                assert line_starts[at - 1] <= c.char_start + offset < line_starts[at]
            # Inside one section, with its headings.
            inside = [s for s in doc.sections if s.char_start <= c.char_start and c.char_end <= s.char_start + len(s.text)]
            assert [s.headings for s in inside] == [c.headings]
            # A column exactly when the chunk before ends on the line where this one starts.
            shared = c.ordinal > 0 and chunks[c.ordinal - 1].line_end == c.line
            assert c.column == (c.char_start - line_starts[c.line - 1] + 1 if shared else None)
            checked += 1
    assert checked > 100


# --- packing and cutting ----------------------------------------------------------


@pytest.mark.parametrize("name, indent", [("long.txt", ""), ("long.md", "    "), ("crlf.txt", "  ")])
def test_chunks_of_a_line_longer_than_a_chunk_have_the_column_where_they_start(tmp_path, name, indent):
    """A file of one long line gave chunks that all start on line 1, cited alike (`long.txt:1`): each
    chunk after the first has the 1-based column where it starts in that line (exact: the indent
    counts, a CRLF file's columns are those of its lines)."""
    words = " ".join(f"word{i:04d}" for i in range(1500))  # 13,499 characters
    newline = "\r\n" if name.startswith("crlf") else "\n"
    doc = read(tmp_path, name, f"Title line{newline}{newline}{indent}{words}{newline}{newline}A short last line.{newline}")

    chunks = chunk_document(doc, chunk_size=1200)

    long_line = [c for c in chunks if c.line == 3]
    assert len(long_line) >= 11
    assert long_line[0].column is None and all(c.column is not None for c in long_line[1:])
    for c in long_line[1:]:
        assert c.column == len(indent) + 1 + words.index(c.text[:8])  # its first word's column in the line
    assert len({(c.line, c.column) for c in chunks}) == len(chunks)  # every chunk cited apart
    assert [c.column for c in chunks if c.line != 3] == [None] * (len(chunks) - len(long_line))


def test_paragraphs_are_packed_greedily_up_to_the_size(tmp_path):
    a, b, c = "a" * 90, "b" * 90, "c" * 90
    doc = read(tmp_path, "notes.txt", f"{a}\n\n{b}\n\n{c}\n")

    chunks = chunk_document(doc, chunk_size=200)

    assert [ch.text for ch in chunks] == [f"{a}\n\n{b}", c]
    assert [(ch.line, ch.char_start, ch.char_end) for ch in chunks] == [(1, 0, 182), (5, 184, 274)]


def test_long_paragraph_is_cut_after_a_sentence_end(tmp_path):
    sentences = [f"Sentence {i:02d} says something about the pump in here." for i in range(10)]
    assert {len(s) for s in sentences} == {50}
    doc = read(tmp_path, "notes.txt", " ".join(sentences) + "\n")

    chunks = chunk_document(doc, chunk_size=200)

    assert [ch.text for ch in chunks] == [
        " ".join(sentences[0:3]),
        " ".join(sentences[3:6]),
        " ".join(sentences[6:9]),
        sentences[9],
    ]


def test_cjk_sentence_ends_need_no_space(tmp_path):
    sentence = "这是一个关于异步代码的句子。"  # 14 characters
    doc = read(tmp_path, "zh.txt", sentence * 20)

    chunks = chunk_document(doc, chunk_size=100)

    assert [len(ch.text) for ch in chunks] == [98, 98, 84]
    assert all(ch.text.endswith("。") for ch in chunks)


def test_lines_without_sentences_are_cut_at_line_breaks(tmp_path):
    lines = [f"- item number {i:03d}" for i in range(40)]  # 17 characters + newline: 11 lines fit in 200
    doc = read(tmp_path, "list.md", "\n".join(lines) + "\n")

    chunks = chunk_document(doc, chunk_size=200)

    assert [ch.text.split("\n") for ch in chunks] == [lines[0:11], lines[11:22], lines[22:33], lines[33:40]]
    assert [ch.line for ch in chunks] == [1, 12, 23, 34]


def test_words_without_punctuation_are_cut_at_whitespace(tmp_path):
    doc = read(tmp_path, "words.txt", " ".join(["abcde"] * 100))

    chunks = chunk_document(doc, chunk_size=200)

    assert [ch.text for ch in chunks] == [" ".join(["abcde"] * 33)] * 3 + ["abcde"]


def test_text_without_whitespace_is_cut_hard_at_the_size(tmp_path):
    doc = read(tmp_path, "blob.txt", "x" * 450)

    chunks = chunk_document(doc, chunk_size=200)

    assert [len(ch.text) for ch in chunks] == [200, 200, 50]
    assert [ch.char_start for ch in chunks] == [0, 200, 400]


def test_blank_and_whitespace_only_text_gives_no_chunk(tmp_path):
    assert chunk_document(read(tmp_path, "blank.txt", " \n\n\t\n")) == []


def test_chunk_size_below_one_is_refused(tmp_path):
    with pytest.raises(InvalidInput, match="chunk_size must be at least 1 character, not 0"):
        chunk_document(read(tmp_path, "a.txt", "text"), chunk_size=0)


# --- sections and headings ----------------------------------------------------------

SECTIONS_MD = """\
# Handbook

Intro text.

## Leave

### Vacation

Twenty-five days.

## Expenses

Keep receipts.
"""


def test_chunks_never_cross_a_heading_and_keep_its_path(tmp_path):
    doc = read(tmp_path, "handbook.md", SECTIONS_MD)

    chunks = chunk_document(doc, chunk_size=1200)

    assert [(c.text, c.headings, c.line) for c in chunks] == [
        ("Intro text.", ("Handbook",), 3),
        ("Twenty-five days.", ("Handbook", "Leave", "Vacation"), 9),
        ("Keep receipts.", ("Handbook", "Expenses"), 13),
    ]


def test_sections_with_the_same_path_are_still_cut_apart(tmp_path):
    doc = read(tmp_path, "faq.md", "## Example\n\nFirst.\n\n## Example\n\nSecond.\n")

    assert [(c.text, c.headings) for c in chunk_document(doc)] == [("First.", ("Example",)), ("Second.", ("Example",))]


def test_embedding_text_puts_title_and_headings_in_front_without_repeating_the_title(tmp_path):
    chunks = chunk_document(read(tmp_path, "handbook.md", SECTIONS_MD))

    assert chunks[1].embedding_text == "Handbook > Leave > Vacation\n\nTwenty-five days."
    plain = Chunk(0, "Body.", "Notes", ("Setup",), None, 1, 0, 5)
    assert plain.embedding_text == "Notes > Setup\n\nBody."
    assert Chunk(0, "Body.", "Notes", (), 3, None, 0, 5).embedding_text == "Notes\n\nBody."
    assert embedding_text("Handbook", ["Handbook", "Leave"], "Text.") == "Handbook > Leave\n\nText."


# --- code fences -------------------------------------------------------------------


def test_a_fence_that_fits_is_never_cut_even_at_its_blank_lines(tmp_path):
    paragraph = "p" * 100
    fence = "```python\n# not a heading\n" + "x = 1\n" * 8 + "\n" + "y = 2\n" * 8 + "```"
    assert len(fence) < 200 < len(paragraph) + 2 + len(fence)
    doc = read(tmp_path, "code.md", f"# Code\n\n{paragraph}\n\n{fence}\n\nAfter.\n")

    chunks = chunk_document(doc, chunk_size=200)

    assert [c.text for c in chunks] == [paragraph, fence + "\n\nAfter."]
    assert [c.headings for c in chunks] == [("Code",), ("Code",)]


def test_a_fence_longer_than_the_size_is_cut_at_line_boundaries(tmp_path):
    code = [f"print('line {i:02d} of the script.') # end" for i in range(30)]  # 37 characters + newline
    fence = "```python\n" + "\n".join(code) + "\n```"
    doc = read(tmp_path, "long.md", fence + "\n")

    chunks = chunk_document(doc, chunk_size=300)

    assert all(len(c.text) <= 300 for c in chunks)
    assert [line for c in chunks for line in c.text.split("\n")] == ["```python", *code, "```"]
    # "```python" and 7 code lines fit in 300 characters, then 7 code lines a chunk.
    assert [c.line for c in chunks] == [1, 9, 16, 23, 30]


def test_text_before_a_fitting_fence_in_one_paragraph_is_cut_before_the_fence(tmp_path):
    text = "Run this:\n" + "w" * 80 + "\n```\n" + "code line\n" * 15 + "```"
    doc = read(tmp_path, "mixed.md", text)

    chunks = chunk_document(doc, chunk_size=200)

    assert [c.text for c in chunks] == ["Run this:\n" + "w" * 80, "```\n" + "code line\n" * 15 + "```"]


# --- pages and lines of other kinds ------------------------------------------------


def test_pdf_chunks_carry_the_page_they_come_from(tmp_path):
    pages = [f"Page {n} text. " + " ".join(f"Sentence {n}.{i} on this page." for i in range(20)) for n in (1, 2, 3)]
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 6, text)
    pdf.output(str(tmp_path / "three.pdf"))
    doc = read_document(tmp_path / "three.pdf")

    chunks = chunk_document(doc, chunk_size=200)

    assert [s.page for s in doc.sections] == [1, 2, 3]
    assert sorted({c.page for c in chunks}) == [1, 2, 3]
    for c in chunks:
        assert " ".join(c.text.split()) in pages[c.page - 1]
        assert c.line is None
    assert [c.text.split()[:2] for c in chunks if c.text.startswith("Page ")] == [["Page", "1"], ["Page", "2"], ["Page", "3"]]


def test_html_chunks_start_at_the_source_line_of_their_first_block(tmp_path):
    paragraphs = [f"Paragraph {i} " + "z" * 100 for i in range(4)]
    html = "<html><body>\n<h1>Guide</h1>\n" + "".join(f"<p>{p}</p>\n\n" for p in paragraphs) + "</body></html>\n"
    doc = read(tmp_path, "guide.html", html)

    chunks = chunk_document(doc, chunk_size=250)

    assert [c.text for c in chunks] == [f"{paragraphs[0]}\n\n{paragraphs[1]}", f"{paragraphs[2]}\n\n{paragraphs[3]}"]
    assert [(c.line, c.headings) for c in chunks] == [(3, ("Guide",)), (7, ("Guide",))]


def test_txt_line_numbers_count_lines_of_the_file(tmp_path):
    content = "Title line\n\n" + "\n\n".join(f"Paragraph {i}. " + "q" * 150 for i in range(5)) + "\n"
    path = tmp_path / "notes.txt"
    path.write_text(content, encoding="utf-8")

    chunks = chunk_document(read_document(path), chunk_size=200)

    lines = content.split("\n")
    assert [c.line for c in chunks] == [1, 5, 7, 9, 11]
    assert [lines[c.line - 1] for c in chunks] == [c.text.split("\n")[0] for c in chunks]


# --- the line of every character (what a citation cites) ----------------------------


def test_html_chunks_know_the_source_line_of_every_word(tmp_path):
    rows = "\n".join(f"<tr><td>host{n}</td>\n<td>rack{n}</td></tr>" for n in range(6))
    page = (
        "<html><body>\n<h1>Inventory</h1>\n"
        "<p>alpha bravo\n  charlie delta\n\n   echo foxtrot</p>\n"
        "<ul><li>golf</li>\n<li>hotel\nindia</li></ul>\n"
        f"<table>\n{rows}\n</table>\n"
        "<pre>\nkilo\n  lima\nmike\n</pre>\n<p>november <b>oscar</b>\npapa</p>\n</body></html>\n"
    )
    doc = read(tmp_path, "inventory.html", page)
    source = page.split("\n")
    for size in (40, 1200):
        chunks = chunk_document(doc, chunk_size=size)
        checked = 0
        for c in chunks:
            assert c.line <= c.line_end
            for offset, word in ((m, w) for m, w in _words(c.text)):
                line = c.line_at(offset)
                assert word in source[line - 1], (size, word, line, source[line - 1])
                assert c.line <= line <= c.line_end
                checked += 1
            last_word = c.text.split()[-1]
            assert last_word in source[c.line_end - 1]
        assert checked == len(_words(doc.text)) - 1  # every word but the heading's


def test_html_lines_count_the_newlines_inside_tags(tmp_path):
    # DocBook/SGML writes tags over several lines (`<B\nCLASS="COMMAND"\n>`, `</TT\n>`); the lines
    # inside them are source lines too (Debian's base-passwd manual: 264 of 273 words cited wrongly).
    entries = "".join(
        f'<DT\n><TT\nCLASS="LITERAL"\n>user{n}</TT\n></DT\n><DD\n><P\n>Account{n} used by\n<B\nCLASS="COMMAND"\n'
        f'>daemon{n}</B\n> when talking{n}\nwith network{n}.</P\n></DD\n>' for n in range(8))
    page = f"<HTML><BODY\n><DL\n>{entries}</DL\n></BODY\n></HTML>\n"
    doc = read(tmp_path, "users.html", page)
    source = page.split("\n")
    chunks = chunk_document(doc, chunk_size=1200)
    words = [(c, offset, word) for c in chunks for offset, word in _words(c.text)]
    assert len(words) == 8 * 9
    for c, offset, word in words:
        line = c.line_at(offset)
        assert word.rstrip(".") in source[line - 1], (word, line, source[line - 1])


def _words(text: str):
    import re

    return [(m.start(), m.group().strip("|")) for m in re.finditer(r"[^\s|]+", text)]


def test_pdf_and_docx_chunks_have_no_lines(tmp_path):
    pdf = FPDF()
    pdf.set_font("helvetica", size=12)
    pdf.add_page()
    pdf.multi_cell(0, 8, "A page of text.")
    pdf.output(str(tmp_path / "a.pdf"))
    (c,) = chunk_document(read_document(tmp_path / "a.pdf"))
    assert (c.page, c.line, c.line_end, c.line_at(3)) == (1, None, None, None)
