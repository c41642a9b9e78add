"""Readers on real files of each kind, written in the test; bad files refused by name."""

from __future__ import annotations

import random
import zipfile
from pathlib import Path

import docx
import pytest
from fpdf import FPDF
from pypdf import PdfReader, PdfWriter
from raw_files import SURROGATE_CMAP, raw_pdf

from metis_pg.chunking import chunk_document
from metis_pg.errors import UnreadableDocument
from metis_pg.readers import KINDS, Document, kind_of, read_document, read_text_file

MARKDOWN = """\
Handbook
========

Welcome to the handbook.

Leave policy
------------

Everyone gets leave.

### Vacation

Twenty-five days a year.

```bash
# not a heading
echo vacation
```

## Sick leave

Tell your manager.

### Empty heading
#### Nested under empty

Body under the nested heading.
"""


def write_pdf(path: Path, pages: list[str], *, title: str | None = None) -> Path:
    pdf = FPDF()
    if title:
        pdf.set_title(title)
    pdf.set_font("Helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 8, text)
    pdf.output(str(path))
    return path


def write_docx(path: Path) -> Path:
    document = docx.Document()
    document.add_heading("Staff handbook", 0)
    document.add_paragraph("Read this first.")
    document.add_heading("Leave policy", 1)
    document.add_paragraph("Leave is planned with the team.")
    document.add_heading("Vacation", 2)
    document.add_paragraph("Twenty-five days a year.")
    table = document.add_table(rows=3, cols=2)
    for r, row in enumerate([("Grade", "Days"), ("Senior", "30")]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    table.cell(2, 0).merge(table.cell(2, 1)).text = "All staff"
    document.add_heading("Expenses", 1)
    document.add_paragraph("Keep every receipt.")
    document.save(str(path))
    return path


# --- Markdown -----------------------------------------------------------------


def test_markdown_sections_follow_atx_and_setext_headings_but_not_fenced_hashes(tmp_path):
    path = tmp_path / "handbook.md"
    path.write_text(MARKDOWN, encoding="utf-8")

    doc = read_document(path)

    assert (doc.kind, doc.title, doc.path) == ("md", "Handbook", str(path))
    assert doc.text == MARKDOWN
    assert [(s.headings, s.line) for s in doc.sections] == [
        (("Handbook",), 4),
        (("Handbook", "Leave policy"), 9),
        (("Handbook", "Leave policy", "Vacation"), 13),
        (("Handbook", "Sick leave"), 22),
        (("Handbook", "Sick leave", "Empty heading", "Nested under empty"), 27),
    ]
    assert doc.sections[2].text == "Twenty-five days a year.\n\n```bash\n# not a heading\necho vacation\n```"
    assert all(doc.text[s.char_start : s.char_start + len(s.text)] == s.text for s in doc.sections)


def test_markdown_front_matter_is_metadata_and_gives_the_title(tmp_path):
    path = tmp_path / "cli.md"
    path.write_text("---\ntitle: CLI Reference\nkeywords: search, cli\n---\n\n# Commands\n\nRun it.\n", encoding="utf-8")

    doc = read_document(path)

    assert doc.title == "CLI Reference"
    assert [(s.headings, s.text, s.line) for s in doc.sections] == [(("Commands",), "Run it.", 8)]


def test_markdown_heading_attribute_lists_and_closing_hashes_are_dropped(tmp_path):
    path = tmp_path / "async.md"
    path.write_text("# Concurrency { #concurrency }\n\nText.\n\n## In a hurry? ##\n\nMore.\n", encoding="utf-8")

    doc = read_document(path)

    assert doc.title == "Concurrency"
    assert [s.headings for s in doc.sections] == [("Concurrency",), ("Concurrency", "In a hurry?")]


def test_markdown_without_headings_is_titled_by_its_file_name(tmp_path):
    path = tmp_path / "release-notes.markdown"
    path.write_text("Just text.\n\n---\n\nAfter a thematic break.\n", encoding="utf-8")

    doc = read_document(path)

    assert doc.title == "release-notes"
    assert [(s.headings, s.text) for s in doc.sections] == [((), "Just text.\n\n---\n\nAfter a thematic break.")]


def test_markdown_front_matter_empty_title_means_no_title_and_only_the_text_is_embedded(tmp_path):
    path = tmp_path / "4380635.md"
    path.write_text('---\ntitle: ""\n---\nFahrenheit invented the mercury thermometer.\n', encoding="utf-8")

    doc = read_document(path)
    chunks = chunk_document(doc)

    assert doc.title == ""
    assert [c.embedding_text for c in chunks] == ["Fahrenheit invented the mercury thermometer."]


# --- Text ---------------------------------------------------------------------

PORTUGUESE = "Configuração do sistema\n\nA instalação é simples: você precisa de três passos e não há exceções.\n"


@pytest.mark.parametrize(
    ("name", "encoded"),
    [
        ("latin1.txt", PORTUGUESE.encode("latin-1")),
        ("utf16.txt", PORTUGUESE.encode("utf-16")),  # with BOM
        ("utf8bom.txt", b"\xef\xbb\xbf" + PORTUGUESE.encode("utf-8")),
        ("crlf.text", PORTUGUESE.replace("\n", "\r\n").encode("utf-8")),
    ],
)
def test_text_files_are_decoded_whatever_their_encoding(tmp_path, name, encoded):
    path = tmp_path / name
    path.write_bytes(encoded)

    doc = read_document(path)

    assert doc.text == PORTUGUESE
    assert (doc.kind, doc.title) == ("txt", "Configuração do sistema")
    assert [(s.headings, s.line, s.char_start) for s in doc.sections] == [((), 1, 0)]
    assert doc.sections[0].text == PORTUGUESE.strip()


def test_random_bytes_without_nul_are_refused_as_binary(tmp_path):
    path = tmp_path / "noise.txt"
    rng = random.Random(1)
    path.write_bytes(bytes(rng.randrange(1, 256) for _ in range(1_000)))

    with pytest.raises(UnreadableDocument, match="binary content or unknown encoding") as caught:
        read_document(path)

    assert caught.value.message.startswith(f"{path}: ")


def test_read_text_file_accepts_bytes_and_paths(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes("Größe und Maßnahmen für Übergänge.".encode("cp1252"))

    assert read_text_file(path) == "Größe und Maßnahmen für Übergänge."
    assert read_text_file("café crème".encode("utf-16")) == "café crème"


def test_text_line_of_first_section_skips_leading_blank_lines(tmp_path):
    path = tmp_path / "padded.txt"
    path.write_text("\n\n   \nFirst words.\n", encoding="utf-8")

    doc = read_document(path)

    assert [(s.line, s.text, s.char_start) for s in doc.sections] == [(4, "First words.", 6)]


# --- HTML ---------------------------------------------------------------------

HTML = """\
<!DOCTYPE html>
<html>
<head>
  <title>Staff  handbook</title>
  <style>body { color: red }</style>
</head>
<body>
<script>var secret = "SCRIPT_TEXT";</script>
<noscript>NOSCRIPT_TEXT</noscript>
<h1>Handbook</h1>
<p>Welcome to the
   handbook.</p>
<h2>Leave policy</h2>
<p>Everyone gets leave.</p>
<h3>Vacation</h3>
<ul>
  <li>Twenty-five days.</li>
  <li>Plan <b>early</b>.</li>
</ul>
<template><p>TEMPLATE_TEXT</p></template>
<table><tr><th>Grade</th><th>Days</th></tr>
<tr><td>Senior</td><td>30</td></tr></table>
<h2>Expenses</h2>
<!-- COMMENT_TEXT -->
<pre>
keep receipts
for a year</pre>
</body>
</html>
"""


def test_html_drops_scripts_and_nests_headings_with_source_lines(tmp_path):
    path = tmp_path / "handbook.html"
    path.write_text(HTML, encoding="utf-8")

    doc = read_document(path)

    assert (doc.kind, doc.title) == ("html", "Staff handbook")
    assert [(s.headings, s.text, s.line) for s in doc.sections] == [
        (("Handbook",), "Welcome to the handbook.", 11),
        (("Handbook", "Leave policy"), "Everyone gets leave.", 14),
        (("Handbook", "Leave policy", "Vacation"), "Twenty-five days.", 17),
        (("Handbook", "Leave policy", "Vacation"), "Plan early.", 18),
        (("Handbook", "Leave policy", "Vacation"), "Grade | Days", 21),
        (("Handbook", "Leave policy", "Vacation"), "Senior | 30", 22),
        (("Handbook", "Expenses"), "keep receipts\nfor a year", 26),
    ]
    for dropped in ("SCRIPT_TEXT", "NOSCRIPT_TEXT", "TEMPLATE_TEXT", "COMMENT_TEXT", "color: red"):
        assert dropped not in doc.text
    assert all(doc.text[s.char_start : s.char_start + len(s.text)] == s.text for s in doc.sections)


def test_html_without_title_tag_takes_the_first_h1(tmp_path):
    path = tmp_path / "page.htm"
    path.write_bytes("<h2>Intro</h2><p>x</p><h1>Café menu</h1><p>Crème brûlée.</p>".encode("utf-8"))

    doc = read_document(path)

    assert doc.title == "Café menu"
    assert [s.headings for s in doc.sections] == [("Intro",), ("Café menu",)]


def test_html_declared_charset_is_honoured(tmp_path):
    path = tmp_path / "legacy.html"
    path.write_bytes('<meta charset="windows-1252"><p>Configuração</p>'.encode("cp1252"))

    assert read_document(path).sections[0].text == "Configuração"


# --- HTML: what is kept (main content) and where headings end ---------------------

SITE_PAGE = """<!DOCTYPE html>
<html><head><title>Pump guide</title></head>
<body>
<header class="site"><a href="/">ACME docs</a> SITE_HEADER_TEXT</header>
<nav><a href="a.html">Prev</a> | <a href="b.html">Up</a> | <a href="/">Home</a> | <a href="c.html">Next</a></nav>
<div class="navheader"><table><tr><td><a href="p.html">Prev</a></td><td>NAVHEADER_TEXT</td></tr></table></div>
<div role="navigation">ROLE_NAV_TEXT</div>
<aside class="toc">ASIDE_TEXT</aside>
<div class="md-sidebar">SIDEBAR_TEXT</div>
<article>
<header><h1>Pump guide</h1></header>
<p>Prime the pump before the first start.</p>
<div class="page-header"><h2>Valves</h2></div>
<p>The relief valve opens at 6 bar.</p>
<footer class="article-footer">ARTICLE_FOOTER_TEXT</footer>
</article>
<footer>SITE_FOOTER_TEXT &copy; ACME</footer>
<div class="navfooter">NAVFOOTER_TEXT</div>
</body></html>
"""


def test_html_keeps_the_main_content_without_navigation_headers_footers_or_sidebars(tmp_path):
    path = tmp_path / "pump.html"
    path.write_text(SITE_PAGE, encoding="utf-8")

    doc = read_document(path)

    for furniture in ("SITE_HEADER_TEXT", "Prev", "NAVHEADER_TEXT", "ROLE_NAV_TEXT", "ASIDE_TEXT", "SIDEBAR_TEXT",
                      "SITE_FOOTER_TEXT", "NAVFOOTER_TEXT"):
        assert furniture not in doc.text, furniture
    assert [(s.headings, s.text) for s in doc.sections] == [
        (("Pump guide",), "Prime the pump before the first start."),
        (("Pump guide", "Valves"), "The relief valve opens at 6 bar."),
        (("Pump guide", "Valves"), "ARTICLE_FOOTER_TEXT"),  # an article's own footer is its content
    ]


def test_html_permalink_signs_are_not_part_of_headings_or_text(tmp_path):
    # Sphinx writes <a class="headerlink">¶</a> after each heading and definition (Debian's HTML manuals).
    path = tmp_path / "policy.html"
    path.write_text('<body><div class="body"><h1>Contents<a class="headerlink" href="#c" title="Permalink">¶</a></h1>'
                    '<h2>Packaging<a class="headerlink" href="#p">¶</a></h2>'
                    '<dl><dt>ffi_call<a class="headerlink" href="#f">¶</a></dt><dd>Calls a function.</dd></dl>'
                    '<p>See <a class="reference" href="#x">#</a> and <a class="permalink" href="#y">the anchor</a>.'
                    '</p></div></body>', encoding="utf-8")

    doc = read_document(path)

    assert "¶" not in doc.text and all("¶" not in h for s in doc.sections for h in s.headings)
    assert doc.sections[0].headings == ("Contents", "Packaging")
    assert "ffi_call\n\nCalls a function." in doc.text
    assert "See # and the anchor." in doc.text  # a link that is not a bare sign stays, whatever its class


def test_html_main_element_is_the_content_when_the_page_has_one(tmp_path):
    path = tmp_path / "main.html"
    path.write_text("<body><div>Menu: Home About</div><main><h1>Pricing</h1><p>Ten euros a month.</p></main>"
                    "<div>Copyright</div></body>", encoding="utf-8")

    doc = read_document(path)

    assert [(s.headings, s.text) for s in doc.sections] == [(("Pricing",), "Ten euros a month.")]


NOTE_PAGE = """<html><body>
<div class="sect1"><div class="titlepage"><div><div><h2 class="title">5.4. Constraints</h2></div></div></div>
<p>Constraints limit the data.</p>
<div class="sect2"><div class="titlepage"><div><div><h3 class="title">5.4.1. Check Constraints</h3></div></div></div>
<p>A check constraint tests a condition.</p>
<div class="note"><h3 class="title">Note</h3><p>Checks must be immutable.</p></div>
<p>After the note, still about checks.</p>
</div>
<div class="sect2"><div class="titlepage"><div><div><h3 class="title">5.4.2. Not-Null Constraints</h3></div></div></div>
<p>A column may refuse nulls.</p>
</div>
<p>Back in the chapter.</p>
</div>
</body></html>
"""


def test_html_heading_scopes_close_where_their_container_ends(tmp_path):
    path = tmp_path / "ddl.html"
    path.write_text(NOTE_PAGE, encoding="utf-8")

    doc = read_document(path)

    assert [(s.headings, s.text) for s in doc.sections] == [
        (("5.4. Constraints",), "Constraints limit the data."),
        (("5.4. Constraints", "5.4.1. Check Constraints"), "A check constraint tests a condition."),
        (("5.4. Constraints", "5.4.1. Check Constraints", "Note"), "Checks must be immutable."),
        (("5.4. Constraints", "5.4.1. Check Constraints"), "After the note, still about checks."),
        (("5.4. Constraints", "5.4.2. Not-Null Constraints"), "A column may refuse nulls."),
        (("5.4. Constraints",), "Back in the chapter."),
    ]
    chunks = chunk_document(doc)
    assert [c.headings[-1] for c in chunks if "after the note" in c.text.lower()] == ["5.4.1. Check Constraints"]


def test_html_flat_headings_still_label_what_follows_them(tmp_path):
    path = tmp_path / "flat.html"
    path.write_text("<body><div><p>Intro.</p><h2>Setup</h2></div><p>Install it.</p>"
                    "<h2>Use</h2><p>Run it.</p><h3>Flags</h3><p>-v is verbose.</p></body>", encoding="utf-8")

    doc = read_document(path)

    assert [(s.headings, s.text) for s in doc.sections] == [
        ((), "Intro."), (("Setup",), "Install it."), (("Use",), "Run it."), (("Use", "Flags"), "-v is verbose."),
    ]


# --- PDF ----------------------------------------------------------------------


def _outlined_pdf(path: Path) -> Path:
    pdf = FPDF()
    pdf.set_font("helvetica", size=12)

    def line(text: str) -> None:
        pdf.multi_cell(0, 8, text, new_x="LMARGIN", new_y="NEXT")

    pdf.add_page()
    pdf.start_section("1 Introduction", level=0)
    line("1 Introduction")
    line("This manual explains the pump.")
    pdf.start_section("1.1 Safety", level=1)
    line("1.1 Safety")
    line("Wear gloves near the valve.")
    pdf.add_page()
    line("Keep the lid closed while it runs.")
    pdf.start_section("2 Maintenance", level=0)
    line("2 Maintenance")
    line("Oil the bearing monthly.")
    pdf.add_page()
    pdf.start_section("Appendix", level=0)  # a bookmark whose title is not printed on its page
    line("Spare parts list.")
    pdf.output(str(path))
    return path


def test_pdf_headings_come_from_the_outline(tmp_path):
    doc = read_document(_outlined_pdf(tmp_path / "pump.pdf"))

    assert [(s.page, s.headings, s.text) for s in doc.sections] == [
        (1, ("1 Introduction",), "This manual explains the pump."),
        (1, ("1 Introduction", "1.1 Safety"), "Wear gloves near the valve."),
        (2, ("1 Introduction", "1.1 Safety"), "Keep the lid closed while it runs."),
        (2, ("2 Maintenance",), "Oil the bearing monthly."),
        (3, ("Appendix",), "Spare parts list."),
    ]
    assert doc.title == "1 Introduction"
    assert "1.1 Safety" in doc.text  # the heading line is in the text, in no section
    chunks = chunk_document(doc)
    assert [(c.page, c.headings[-1]) for c in chunks] == [
        (1, "1 Introduction"), (1, "1.1 Safety"), (2, "1.1 Safety"), (2, "2 Maintenance"), (3, "Appendix")]


def test_pdf_gives_one_section_per_page_with_its_number(tmp_path):
    path = write_pdf(
        tmp_path / "manual.pdf",
        ["Page one talks about the pump.", "Page two covers valve PO-2231.", "Page three is the end."],
        title="Pump manual",
    )

    doc = read_document(path)

    assert (doc.kind, doc.title, doc.warnings) == ("pdf", "Pump manual", ())
    assert [(s.page, s.text, s.line, s.headings) for s in doc.sections] == [
        (1, "Page one talks about the pump.", None, ()),
        (2, "Page two covers valve PO-2231.", None, ()),
        (3, "Page three is the end.", None, ()),
    ]
    assert all(doc.text[s.char_start : s.char_start + len(s.text)] == s.text for s in doc.sections)


def test_pdf_without_metadata_title_takes_its_first_line_and_warns_of_blank_pages(tmp_path):
    pdf = FPDF()
    pdf.set_font("Helvetica", size=12)
    pdf.add_page()
    pdf.multi_cell(0, 8, "Quarterly report\nRevenue grew.")
    pdf.add_page()
    pdf.rect(20, 20, 100, 50, style="F")
    pdf.output(str(tmp_path / "report.pdf"))

    doc = read_document(tmp_path / "report.pdf")

    assert doc.title == "Quarterly report"
    assert [s.page for s in doc.sections] == [1]
    assert doc.warnings == (f"{tmp_path / 'report.pdf'}: no text on pages 2 (scanned?)",)


# --- docx ---------------------------------------------------------------------


def test_docx_sections_follow_title_and_heading_styles_and_keep_tables(tmp_path):
    path = write_docx(tmp_path / "handbook.docx")

    doc = read_document(path)

    assert (doc.kind, doc.title) == ("docx", "Staff handbook")
    assert [(s.headings, s.text, s.page, s.line) for s in doc.sections] == [
        (("Staff handbook",), "Read this first.", None, None),
        (("Staff handbook", "Leave policy"), "Leave is planned with the team.", None, None),
        (("Staff handbook", "Leave policy", "Vacation"), "Twenty-five days a year.\n\nGrade | Days\n\nSenior | 30\n\nAll staff", None, None),
        (("Staff handbook", "Expenses"), "Keep every receipt.", None, None),
    ]
    assert all(doc.text[s.char_start : s.char_start + len(s.text)] == s.text for s in doc.sections)


# --- kinds and refusals -------------------------------------------------------


def test_kind_of_maps_every_extension_case_insensitively():
    assert kind_of("a/B.MD") == "md"
    assert kind_of("report.Docx") == "docx"
    assert kind_of("archive.zip") is None
    assert sorted(set(KINDS.values())) == ["docx", "html", "md", "pdf", "txt"]


def _truncated_pdf(tmp_path: Path) -> Path:
    data = write_pdf(tmp_path / "whole.pdf", ["Some text.", "More text."]).read_bytes()
    path = tmp_path / "truncated.pdf"
    path.write_bytes(data[: len(data) // 2])
    return path


def _encrypted_pdf(tmp_path: Path) -> Path:
    writer = PdfWriter(clone_from=PdfReader(write_pdf(tmp_path / "plain.pdf", ["Secret text."])))
    writer.encrypt(user_password="secret", owner_password="owner")
    path = tmp_path / "encrypted.pdf"
    with open(path, "wb") as f:
        writer.write(f)
    return path


def _image_only_pdf(tmp_path: Path) -> Path:
    pdf = FPDF()
    pdf.add_page()
    pdf.rect(20, 20, 100, 50, style="F")
    path = tmp_path / "scanned.pdf"
    pdf.output(str(path))
    return path


def _not_a_zip_docx(tmp_path: Path) -> Path:
    path = tmp_path / "fake.docx"
    path.write_bytes(b"This is a plain text file renamed to .docx")
    return path


def _broken_xml_docx(tmp_path: Path) -> Path:
    path = tmp_path / "broken.docx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("word/document.xml", "<w:document><unclosed")
    return path


def _zip_bomb_docx(tmp_path: Path) -> Path:
    path = tmp_path / "bomb.docx"
    zeros = bytes(1 << 20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        with archive.open("word/document.xml", "w", force_zip64=True) as f:
            for _ in range(300):  # 300 MB of zeros, about 1 MB on disk
                f.write(zeros)
    return path


def _binary_txt(tmp_path: Path) -> Path:
    path = tmp_path / "image.txt"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    return path


def _empty_md(tmp_path: Path) -> Path:
    path = tmp_path / "empty.md"
    path.write_bytes(b"")
    return path


def _unknown_kind(tmp_path: Path) -> Path:
    path = tmp_path / "table.xlsx"
    path.write_bytes(b"PK\x03\x04")
    return path


def _missing(tmp_path: Path) -> Path:
    return tmp_path / "missing.md"


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (_truncated_pdf, "truncated or corrupt PDF"),
        (_encrypted_pdf, "encrypted PDF"),
        (_image_only_pdf, "no text layer: scanned PDF?"),
        (_not_a_zip_docx, "not a zip archive"),
        (_broken_xml_docx, "corrupt .docx"),
        (_zip_bomb_docx, "zip bomb?"),
        (_binary_txt, "binary content"),
        (_empty_md, "empty file"),
        (_unknown_kind, "unknown kind '.xlsx'"),
        (_missing, "cannot open"),
    ],
)
def test_unreadable_files_raise_with_their_name_and_reason(tmp_path, make, reason):
    path = make(tmp_path)

    with pytest.raises(UnreadableDocument) as caught:
        read_document(path)

    assert caught.value.message.startswith(f"{path}: ")
    assert reason in caught.value.message


def test_file_over_max_bytes_is_refused_before_reading(tmp_path):
    path = tmp_path / "big.txt"
    path.write_text("x" * 2_000, encoding="utf-8")

    with pytest.raises(UnreadableDocument, match="file too large: 2000 bytes, over the 1000-byte limit") as caught:
        read_document(path, max_bytes=1_000)

    assert str(path) in caught.value.message
    assert isinstance(read_document(path, max_bytes=2_000), Document)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        # A content stream that does not inflate: pypdf logs the zlib error and returns no text.
        (raw_pdf(b"not deflated at all", stream_filter=b"/FlateDecode"),
         "corrupt PDF: text extraction failed on every page (1 page; page 1: "),
        (raw_pdf(b"BT /F1 12 Tf (x) Tj ET", no_pages=True), "PDF without pages"),
        (b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 9 0 R >>\nendobj\ntrailer << /Root 1 0 R >>\n%%EOF\n",
         "corrupt PDF"),
        (b"%PDF-1.4\nnothing but words\n", "truncated or corrupt PDF (no %%EOF end marker)"),
    ],
    ids=["bad content stream", "no pages", "broken object tree", "no end marker"],
)
def test_pdf_failures_say_what_they_are_not_scanned(tmp_path, data, reason):
    path = tmp_path / "broken.pdf"
    path.write_bytes(data)

    with pytest.raises(UnreadableDocument) as caught:
        read_document(path)

    assert caught.value.message.startswith(f"{path}: {reason}")
    assert "scanned" not in caught.value.message and "OCR" not in caught.value.message


def test_pdf_text_and_title_with_nul_and_lone_surrogates_are_cleaned(tmp_path):
    path = tmp_path / "odd.pdf"
    path.write_bytes(raw_pdf(b"BT /F1 12 Tf 72 700 Td (AB tide tables) Tj ET", b"/Title <FEFF0041D800>",
                             to_unicode=SURROGATE_CMAP))

    doc = read_document(path)

    assert doc.title == "\u00fe\u00ffA\u00d8"  # pypdf's PDFDocEncoding fallback; its NULs dropped
    assert doc.text == "\ufffd tide tables"  # glyph A maps to U+D800: replaced; B maps to NUL: dropped
    assert doc.sections[0].text == doc.text
    doc.text.encode("utf-8")


def test_pdf_encrypted_with_owner_password_only_is_read(tmp_path):
    writer = PdfWriter(clone_from=PdfReader(write_pdf(tmp_path / "plain.pdf", ["Open to all readers."])))
    writer.encrypt(user_password="", owner_password="owner")
    path = tmp_path / "owner-only.pdf"
    with open(path, "wb") as f:
        writer.write(f)

    assert [s.text for s in read_document(path).sections] == ["Open to all readers."]

