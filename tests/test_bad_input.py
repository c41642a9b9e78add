"""Bad input loses nothing: each bad file is skipped with its name and reason, the rest indexes.

Every file is made here: truncated, encrypted and text-less PDFs, a .docx that is
not a zip and a zip bomb, a binary file named .txt, an empty file, a file over
the size cap, a named pipe, Latin-1 and UTF-16 text, a link leaving the folder
and link loops.
Through the API and through ``metis index``.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest
from fpdf import FPDF
from pypdf import PdfReader, PdfWriter
from typer.testing import CliRunner

from metis_pg.cli import app

PORTUGUESE = "Configuração do sistema\n\nA instalação é simples: você precisa de três passos.\n"
CAP_BYTES = 2_000_000

#: file → what report.failed says of it (a part of the reason).
FAILED = {
    "truncated.pdf": "truncated or corrupt PDF",
    "encrypted.pdf": "encrypted PDF (needs a password)",
    "scanned.pdf": "no text layer: scanned PDF?",
    "fake.docx": "not a .docx: not a zip archive",
    "bomb.docx": "zip bomb?",
    "image.txt": "binary content",
    "empty.md": "empty file",
    "big.txt": "2,100,000 bytes is over the limit of 2,000,000 bytes",
    "pipe.txt": "not a regular file",  # a FIFO: reading it would wait for ever
}
#: link → what the report's warnings say of it.
LINKS = {
    "outside.txt": "symbolic link leaving",
    "loop1.txt": "symbolic link loop",
    "loop2.txt": "symbolic link loop",
}


def pdf_bytes(pages: list[str]) -> bytes:
    pdf = FPDF()
    pdf.set_font("Helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 8, text)
    return bytes(pdf.output())


def make_folder(root: Path) -> Path:
    kb = root / "kb"
    kb.mkdir()
    # Good files.
    (kb / "good.md").write_text("# Onboarding\n\nNew staff receive a badge on their first day.\n", encoding="utf-8")
    (kb / "latin1.txt").write_bytes(PORTUGUESE.encode("latin-1"))
    (kb / "utf16.txt").write_bytes(PORTUGUESE.replace("três", "quatro").encode("utf-16"))  # with BOM
    # Bad files.
    whole = pdf_bytes(["Quarterly figures.", "More figures."])
    (kb / "truncated.pdf").write_bytes(whole[: len(whole) // 2])
    (root / "plain.pdf").write_bytes(pdf_bytes(["Secret."]))
    writer = PdfWriter(clone_from=PdfReader(root / "plain.pdf"))
    writer.encrypt(user_password="secret", owner_password="owner")
    with open(kb / "encrypted.pdf", "wb") as f:
        writer.write(f)
    scanned = FPDF()
    scanned.add_page()
    scanned.rect(20, 20, 100, 50, style="F")
    (kb / "scanned.pdf").write_bytes(bytes(scanned.output()))
    (kb / "fake.docx").write_bytes(b"This is a plain text file renamed to .docx")
    zeros = bytes(1 << 20)
    with zipfile.ZipFile(kb / "bomb.docx", "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        with archive.open("word/document.xml", "w", force_zip64=True) as f:
            for _ in range(210):  # 210 MB of zeros, under 1 MB on disk
                f.write(zeros)
    (kb / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    (kb / "empty.md").write_bytes(b"")
    (kb / "big.txt").write_bytes(b"words " * 350_000)  # 2,100,000 bytes
    os.mkfifo(kb / "pipe.txt")
    # Links: out of the folder, file loops, a folder loop.
    (root / "outside").mkdir()
    (root / "outside" / "secret.txt").write_text("The vault code is platypus.", encoding="utf-8")
    os.symlink(root / "outside" / "secret.txt", kb / "outside.txt")
    os.symlink(kb / "loop2.txt", kb / "loop1.txt")
    os.symlink(kb / "loop1.txt", kb / "loop2.txt")
    os.symlink(kb, kb / "loopdir")
    return kb


@pytest.fixture()
def bad_folder(tmp_path) -> Path:
    kb = make_folder(tmp_path)
    assert (kb / "bomb.docx").stat().st_size < CAP_BYTES
    return kb


def test_each_bad_file_is_skipped_with_its_reason_and_the_rest_is_searchable(metis, base_name, bad_folder):
    report = metis.index(base_name, bad_folder, max_file_bytes=CAP_BYTES)

    assert (report.read, report.new) == (3, 3)
    failed = {f.path: f.reason for f in report.failed}
    assert sorted(failed) == sorted(FAILED)
    for name, reason in FAILED.items():
        assert failed[name].startswith(str(bad_folder / name)), name  # the reason names the file
        assert reason in failed[name], name
    for name, reason in LINKS.items():
        assert [w for w in report.warnings if w.startswith(f"{bad_folder / name}: skipped: {reason}")], name
    # Decoded correctly, found by the folded word.
    answer = metis.search(base_name, "configuracao", mode="keyword")
    assert {r.citation.document for r in answer.results} == {"latin1.txt", "utf16.txt"}
    assert all(r.citation.title == "Configuração do sistema" for r in answer.results)
    assert "você precisa de quatro passos" in next(r.text for r in answer.results if r.citation.document == "utf16.txt")
    assert metis.search(base_name, "badge first day").results[0].citation.document == "good.md"
    assert metis.search(base_name, "platypus", mode="keyword").results == ()
    info = metis.base(base_name)
    assert (info.documents, info.status) == (3, "ready")


def test_index_command_reports_each_bad_file_and_takes_a_size_cap(metis, base_name, bad_folder):
    runner = CliRunner()
    args = ["index", str(bad_folder), "--base", base_name, "--max-file-mb", "2", "--dsn", metis.dsn]

    as_json = runner.invoke(app, [*args, "--json"])
    human = runner.invoke(app, args)

    assert as_json.exit_code == 0, as_json.output
    report = json.loads(as_json.stdout)
    assert (report["new"], report["status"]) == (3, "ready")
    assert sorted(f["path"] for f in report["failed"]) == sorted(FAILED)
    for f in report["failed"]:
        assert FAILED[f["path"]] in f["reason"]
    assert human.exit_code == 0, human.output
    assert "3 unchanged" in human.output and f"{len(FAILED)} failed" in human.output
    for name in FAILED:
        assert f"skipped {name}: {bad_folder / name}: " in human.output
    for name in LINKS:
        assert f"warning: {bad_folder / name}: skipped: symbolic link" in human.output


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        (PORTUGUESE, "latin-1"),
        ("Smørrebrød og æblekage på Østerbro.", "latin-1"),
        ("Café crème brûlée à la française, s'il vous plaît.", "cp1252"),
        ("Türkçe metin: şişli, ığdır, çanakkale ve güzel günler.", "cp1254"),
        ("Zażółć gęślą jaźń, to jest dokument testowy o systemie.", "cp1250"),
        ("Привет, как дела? Это тестовый документ о системе.", "cp1251"),
    ],
)
def test_short_legacy_text_is_decoded_by_its_code_page(tmp_path, text, encoding):
    from metis_pg.readers import read_document

    path = tmp_path / "short.txt"
    path.write_bytes(text.encode(encoding))

    assert read_document(path).text == text
