"""What readers leave out of passages (issue 25, item 8): a PDF's running headers and footers, an
HTML page's table of contents. Indexed and read back through ``metis index`` and ``metis get``."""

from __future__ import annotations

from pathlib import Path

from fpdf import FPDF

from cli_runner import run_cli

BODIES = [
    "If a MIME type is given twice, the later definition wins over the earlier one.",
    "Glob patterns are matched against the file name, longest pattern first.",
    "Magic rules look at the first bytes of the file and weigh each match.",
    "Aliases map old type names onto the new canonical names.",
    "Subclassing lets a text type inherit the handlers of its parent type.",
]


class _Running(FPDF):
    def header(self) -> None:
        self.set_font("Helvetica", size=10)
        self.cell(0, 10, "Shared MIME-info Database", new_x="LMARGIN", new_y="NEXT")

    def footer(self) -> None:
        self.set_y(-15)
        self.set_font("Helvetica", size=10)
        self.cell(0, 10, f"Page {self.page_no()} of {len(BODIES)}")


def running_pdf(path: Path) -> Path:
    """Five pages, each under the running header "Shared MIME-info Database" and over "Page N of 5"."""
    pdf = _Running()
    for body in BODIES:
        pdf.add_page()
        pdf.set_font("Helvetica", size=12)
        pdf.multi_cell(0, 10, body)
    pdf.output(str(path))
    return path


TOC_PAGE = """<!DOCTYPE html><html><head><title>28.2. The Cumulative Statistics System</title></head><body>
<div class="navheader"><a href="monitoring.html">Prev</a> <a href="index.html">Home</a></div>
<div class="sect1"><h2>28.2. The Cumulative Statistics System</h2>
<div class="toc"><dl class="toc">""" + "".join(
    f'<dt><span class="sect2"><a href="#s{i}">28.2.{i}. pg_stat_view_{i}</a></span></dt>' for i in range(1, 60)
) + """</dl></div>
<p>The cumulative statistics system collects counts of accesses to tables and indexes.</p>
</div></body></html>"""


def test_running_headers_and_footers_are_not_text(dsn, base_name, tmp_path):
    folder = tmp_path / "kb"
    folder.mkdir()
    running_pdf(folder / "mime.pdf")
    assert run_cli("index", str(folder), "--base", base_name, "--dsn", dsn).code == 0
    [doc] = run_cli("get", base_name, "mime.pdf", "--json", "--dsn", dsn).json()
    text = doc["text"]
    assert all(body.split()[0] in text for body in BODIES)
    assert "Shared MIME-info Database" not in text and "Page 3 of 5" not in text, text
    found = run_cli("search", base_name, "glob patterns longest", "--json", "--dsn", dsn).json()["results"][0]
    assert found["citation"]["page"] == 2 and "Shared MIME" not in found["citation"]["snippet"]


def test_an_html_table_of_contents_is_not_a_passage(dsn, base_name, tmp_path):
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "monitoring-stats.html").write_text(TOC_PAGE, encoding="utf-8")
    assert run_cli("index", str(folder), "--base", base_name, "--dsn", dsn).code == 0
    [doc] = run_cli("get", base_name, "monitoring-stats.html", "--json", "--dsn", dsn).json()
    assert "pg_stat_view_" not in doc["text"] and "collects counts of accesses" in doc["text"]
