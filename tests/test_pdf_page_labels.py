"""A PDF's printed page labels are cited with its page numbers (issue 25, item 8): a PDF whose
front matter is numbered i-iii and whose body starts again at 1 (``/PageLabels``, written by pypdf)
cites its 5th page as ``p.5 (printed 2)``. Through ``metis index`` / ``metis search`` (JSON and text),
HTTP, and the analyst view ``metis.chunk_citations_v5``; a PDF without labels cites its pages alone."""

from __future__ import annotations

from pathlib import Path

import httpx
from fpdf import FPDF
from pypdf import PdfReader, PdfWriter
from pypdf.constants import PageLabelStyle

from cli_runner import run_cli
from metis_pg import service

PAGES = [
    "Preface: who this manual is for and how it is laid out.",
    "Contents of the manual, chapter by chapter.",
    "Acknowledgements to the translators of the handbook.",
    "Chapter one explains how tokens are issued by the keyring daemon.",
    "Chapter two explains how a revoked certificate is renewed with tasn1 encoding.",
]


def labelled_pdf(path: Path, *, labels: bool = True) -> Path:
    """Five pages of text (fpdf2); with `labels`, pages 1-3 print i-iii and pages 4-5 print 1-2 (pypdf)."""
    pdf = FPDF()
    for body in PAGES:
        pdf.add_page()
        pdf.set_font("Helvetica", size=12)
        pdf.multi_cell(0, 10, body)
    pdf.output(str(path))
    if labels:
        writer = PdfWriter(clone_from=str(path))
        writer.set_page_label(0, 2, style=PageLabelStyle.LOWERCASE_ROMAN, start=1)
        writer.set_page_label(3, 4, style=PageLabelStyle.DECIMAL, start=1)
        writer.write(str(path))
        assert PdfReader(str(path)).page_labels == ["i", "ii", "iii", "1", "2"]
    return path


def test_search_cites_the_printed_label_beside_the_page(dsn, metis, base_name, tmp_path):
    folder = tmp_path / "kb"
    folder.mkdir()
    labelled_pdf(folder / "manual.pdf")
    labelled_pdf(folder / "plain.pdf", labels=False)
    assert run_cli("index", str(folder), "--base", base_name, "--dsn", dsn).code == 0

    question = "revoked certificate renewed tasn1"
    # The two files hold the same text: copies kept, so that both are cited (a search collapses
    # copies of one text by default: docs/search.md, Copies of one text).
    results = run_cli("search", base_name, question, "--keep-copies", "--json", "--dsn", dsn).json()["results"]
    by_document = {}
    for r in results:
        by_document.setdefault(r["citation"]["document"], r["citation"])
    manual, plain = by_document["manual.pdf"], by_document["plain.pdf"]
    assert (manual["page"], manual["page_label"]) == (5, "2")
    assert plain["page"] == 5 and "page_label" not in plain  # no /PageLabels: the page's number alone
    text = run_cli("search", base_name, question, "-n", "2", "--keep-copies", "--dsn", dsn).stdout
    assert "manual.pdf p.5 (printed 2)" in text and "plain.pdf p.5 ·" in text, text
    # The citation as printed reads the page back (metis get; MCP get takes a search's citation so).
    [page] = run_cli("get", base_name, "manual.pdf p.5 (printed 2)", "--json", "--dsn", dsn).json()
    assert "revoked certificate" in page["text"] and "keyring" not in page["text"]

    front = run_cli("search", base_name, "acknowledgements translators", "--keep-copies", "--json",
                    "--dsn", dsn).json()["results"]
    first = next(r["citation"] for r in front if r["citation"]["document"] == "manual.pdf")
    assert (first["page"], first["page_label"]) == (3, "iii")

    token = "test-token-" + "9" * 24
    with service.running(service.create_app(metis, tokens=[token])) as url:
        answer = httpx.post(f"{url}/search", headers={"Authorization": f"Bearer {token}"}, timeout=60,
                            json={"bases": base_name, "question": question, "top_k": 5,
                                  "fusion": {"collapse_copies": False}}).json()
    cited = next(r["citation"] for r in answer["results"] if r["citation"]["document"] == "manual.pdf")
    assert (cited["page"], cited["page_label"]) == (5, "2")

    with metis.pool.connection() as conn:
        rows = conn.execute("SELECT document, page_start, page_label FROM metis.chunk_citations_v5 WHERE base = %s"
                            " ORDER BY document, page_start", (base_name,)).fetchall()
    assert rows == [("manual.pdf", 1, "i"), ("manual.pdf", 2, "ii"), ("manual.pdf", 3, "iii"),
                    ("manual.pdf", 4, "1"), ("manual.pdf", 5, "2")] + [("plain.pdf", p, None) for p in range(1, 6)]
