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

import metis_pg.readers.markdown as markdown_reader
from metis_pg import indexing
from metis_pg.indexing import reading, sources
from metis_pg.cli import app

from corpus import write_corpus
from raw_files import SURROGATE_CMAP, raw_pdf

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
    "index.md": "symbolic link to good.md, which is indexed under its own name",
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
    os.symlink(kb / "good.md", kb / "index.md")  # a second name of a file indexed under its own
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


# --- issue 13: one file never aborts a run; a walk error is never a deletion ----------------------



write_files = write_corpus


GOOD = {
    "good.md": "# Onboarding\n\nNew staff receive a badge on their first day.\n",
    "other.txt": "The canteen opens at noon and closes at three.\n",
}


@pytest.mark.parametrize(
    "error",
    [
        UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"),
        RecursionError("maximum recursion depth exceeded"),
        ValueError("a parser's complaint"),
        MemoryError(),
        KeyError("word/styles.xml"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_any_exception_reading_one_file_skips_it_and_the_run_writes_its_batch(
    metis, base_name, tmp_path, monkeypatch, error
):
    kb = write_files(tmp_path / "kb", {**GOOD, "bad.md": "# Bad\n\nThis one makes the reader fail.\n"})
    real = markdown_reader.read

    def failing(path, data):
        if path.endswith("bad.md"):
            raise error
        return real(path, data)

    monkeypatch.setattr(markdown_reader, "read", failing)

    first = metis.index(base_name, kb)
    again = metis.index(base_name, kb)

    assert [f.path for f in first.failed] == ["bad.md"]
    assert first.failed[0].reason.startswith(f"{kb / 'bad.md'}: ")
    assert type(error).__name__ in first.failed[0].reason or "out of memory" in first.failed[0].reason
    assert (first.new, first.status) == (2, "ready")
    assert (again.unchanged, again.deleted, [f.path for f in again.failed]) == (2, 0, ["bad.md"])
    assert metis.search(base_name, "badge first day").results[0].citation.document == "good.md"


def test_an_exception_while_chunking_one_file_skips_it(metis, base_name, tmp_path, monkeypatch):
    kb = write_files(tmp_path / "kb", {**GOOD, "bad.txt": "Chunking this one fails.\n"})
    real = reading.chunk_document

    def failing(doc, **kwargs):
        if doc.path.endswith("bad.txt"):
            raise IndexError("list index out of range")
        return real(doc, **kwargs)

    monkeypatch.setattr(reading, "chunk_document", failing)

    report = metis.index(base_name, kb)

    assert [(f.path, f.reason) for f in report.failed] == [
        ("bad.txt", f"{kb / 'bad.txt'}: could not be read (IndexError: list index out of range)")
    ]
    assert report.new == 2


def test_a_file_name_with_undecodable_bytes_is_indexed_under_a_stable_escaped_name(metis, base_name, tmp_path):
    kb = write_files(tmp_path / "kb", GOOD)
    odd = os.path.join(os.fsencode(kb), b"caf\xe9 notes.md")  # Latin-1 é: not UTF-8
    with open(odd, "wb") as f:
        f.write(b"# Caf\xc3\xa9\n\nThe espresso machine is descaled on Fridays.\n")

    first = metis.index(base_name, kb)
    hit = metis.search(base_name, "espresso descaled", mode="keyword").results[0]
    again = metis.index(base_name, kb)
    os.remove(odd)
    gone = metis.index(base_name, kb)

    assert (first.new, first.failed) == (3, ())
    assert (hit.citation.document, hit.citation.title) == ("caf\\xe9 notes.md", "Café")
    assert (again.unchanged, again.new, again.deleted) == (3, 0, 0)
    assert (gone.unchanged, gone.deleted) == (2, 1)


def test_undecodable_name_as_its_own_title_and_in_a_reason_is_escaped(metis, base_name, tmp_path):
    kb = write_files(tmp_path / "kb", GOOD)
    with open(os.path.join(os.fsencode(kb), b"r\xe9sum\xe9.txt"), "wb") as f:
        f.write(b"\n\n" + b"zebra crossing " * 10 + b"\n")  # a first line too long to be the title: the name is
    with open(os.path.join(os.fsencode(kb), b"vide\xff.md"), "wb") as f:
        pass  # empty: refused with a reason naming it

    report = metis.index(base_name, kb)

    assert [(f.path, f.reason) for f in report.failed] == [("vide\\xff.md", f"{kb}/vide\\xff.md: empty file")]
    hit = metis.search(base_name, "zebra crossing", mode="keyword").results[0]
    assert (hit.citation.document, hit.citation.title) == ("r\\xe9sum\\xe9.txt", "r\\xe9sum\\xe9")


def test_pdf_whose_title_and_text_decode_to_nul_and_lone_surrogates_indexes_cleaned(metis, base_name, tmp_path):
    kb = write_files(tmp_path / "kb", GOOD)
    # /Title: UTF-16 with a lone surrogate; pypdf falls back to PDFDocEncoding and gives NULs.
    (kb / "nul-title.pdf").write_bytes(raw_pdf(b"BT /F1 12 Tf 72 700 Td (Quarterly lighthouse figures) Tj ET",
                                               b"/Title <FEFF0041D800>"))
    (kb / "surrogate.pdf").write_bytes(raw_pdf(b"BT /F1 12 Tf 72 700 Td (AB harbour tide tables) Tj ET",
                                               b"/Title (Tides)", to_unicode=SURROGATE_CMAP))

    report = metis.index(base_name, kb)

    assert (report.new, report.failed) == (4, ())
    lighthouse = metis.search(base_name, "lighthouse figures", mode="keyword").results[0]
    assert "\x00" not in lighthouse.citation.title and lighthouse.citation.title.endswith("A\u00d8")
    tide = metis.search(base_name, "harbour tide", mode="keyword").results[0]
    assert (tide.citation.title, tide.text) == ("Tides", "\ufffd harbour tide tables")


def remove_tree(top: Path) -> None:
    """Remove a folder tree without recursion (shutil.rmtree, and pytest's cleanup, recurse per level)."""
    folders, stack = [], [top]
    while stack:
        folder = stack.pop()
        folders.append(folder)
        for entry in os.scandir(folder):
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
            else:
                os.unlink(entry.path)
    for folder in reversed(folders):
        os.rmdir(folder)


def test_a_folder_nested_a_thousand_levels_indexes_without_recursion_error(metis, base_name, tmp_path):
    kb = write_files(tmp_path / "kb", GOOD)
    deep = kb
    try:
        for _ in range(1000):  # one level at a time: Path.mkdir(parents=True) itself recurses
            deep = deep / "d"
            deep.mkdir()
        (deep / "bottom.md").write_text("The deepest note mentions the submarine.\n", encoding="utf-8")

        report = metis.index(base_name, kb)
        again = metis.index(base_name, kb)
    finally:
        remove_tree(kb / "d")

    assert (report.new, report.failed) == (3, ())
    hit = metis.search(base_name, "submarine", mode="keyword").results[0]
    assert hit.citation.document == "d/" * 1000 + "bottom.md"
    assert (again.unchanged, again.deleted) == (3, 0)


def refuse_listing(monkeypatch, folder: Path) -> None:
    """Make os.scandir(folder) fail as it does for a user without read permission (EACCES)."""
    real = os.scandir

    def scandir(path="."):
        if os.fspath(path) == os.fspath(folder):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)


def test_a_folder_that_cannot_be_listed_keeps_its_documents_and_warns(metis, base_name, tmp_path, monkeypatch):
    kb = write_files(tmp_path / "kb", {**GOOD, "sub/a.txt": "Alpha walrus.", "sub/b.txt": "Beta walrus.",
                                      "sub/deeper/c.txt": "Gamma walrus."})
    assert metis.index(base_name, kb).new == 5
    refuse_listing(monkeypatch, kb / "sub")

    report = metis.index(base_name, kb)

    assert (report.deleted, report.unchanged, report.failed) == (0, 2, ())
    assert (f"{kb / 'sub'}: folder cannot be listed (Permission denied): not indexed;"
            " its 3 indexed documents kept, not deleted") in report.warnings
    assert len(metis.search(base_name, "walrus", mode="keyword").results) == 3
    monkeypatch.undo()
    (kb / "sub" / "a.txt").unlink()
    assert metis.index(base_name, kb).deleted == 1  # once listed again, what is gone is deleted


def test_an_unlistable_source_folder_deletes_nothing(metis, base_name, tmp_path, monkeypatch):
    kb = write_files(tmp_path / "kb", GOOD)
    metis.index(base_name, kb)
    refuse_listing(monkeypatch, kb)

    report = metis.index(base_name, kb)

    assert (report.deleted, report.status) == (0, "ready")
    assert report.warnings == (
        f"{kb}: folder cannot be listed (Permission denied): not indexed; its 2 indexed documents kept, not deleted",
    )
    assert metis.base(base_name).documents == 2


def test_a_file_that_cannot_be_opened_on_reindex_keeps_its_indexed_version(metis, base_name, tmp_path, monkeypatch):
    kb = write_files(tmp_path / "kb", GOOD)
    metis.index(base_name, kb)
    real = reading.read_file_once

    def read_file_once(path, **kwargs):
        if path.endswith("good.md"):
            raise PermissionError(13, "Permission denied", path)
        return real(path, **kwargs)

    monkeypatch.setattr(reading, "read_file_once", read_file_once)

    report = metis.index(base_name, kb)

    assert (report.deleted, report.unchanged) == (0, 1)
    assert [(f.path, f.reason) for f in report.failed] == [
        ("good.md", f"{kb / 'good.md'}: cannot open: Permission denied (its indexed version is kept)")
    ]
    assert metis.search(base_name, "badge first day").results[0].citation.document == "good.md"


def walk_as_nobody(root: Path) -> dict:
    """Run walk_source(root) in a child process that has given up root (uid/gid of 'nobody')."""
    import pwd

    nobody = pwd.getpwnam("nobody")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no exec (the interpreter lives under /root), just the walk
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            unlisted, skipped = {}, {}
            files = [str(p.relative_to(root)) for p in indexing.walk_source(
                root, lambda p, r: skipped.__setitem__(str(p.relative_to(root)), r),
                lambda p, r: unlisted.__setitem__(str(p.relative_to(root)), r))]
            opened = {}
            for name in files:
                try:
                    (root / name).stat()
                    opened[name] = "ok"
                except OSError as exc:
                    opened[name] = exc.strerror
            os.write(write_end, json.dumps({"files": files, "unlisted": unlisted, "opened": opened}).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0, "the walk failed in the child"
    return json.loads(data)


@pytest.mark.skipif(os.geteuid() != 0, reason="gives up root in a child process to make chmod bite")
def test_walk_as_an_ordinary_user_skips_unlistable_and_unsearchable_folders(tmp_path):
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="metis-walk-"))  # tmp_path's parents are 0700: not for nobody
    try:
        base.chmod(0o755)
        root = write_files(base / "kb", {"top.md": "Top.", "closed/a.md": "A.", "closed/b.md": "B.",
                                         "peek/c.md": "C.", "peek/inner/d.md": "D.", "open/e.md": "E."})
        for folder in (root, *[p for p in root.rglob("*") if p.is_dir()]):
            folder.chmod(0o755)
        (root / "closed").chmod(0o000)  # neither listable nor searchable
        (root / "peek").chmod(0o644)  # listable (r), not searchable (no x)

        seen = walk_as_nobody(root)
    finally:
        for folder in (base, *base.rglob("*")):
            if folder.is_dir():
                folder.chmod(0o755)
        shutil.rmtree(base)

    assert seen["files"] == ["top.md", "open/e.md", "peek/c.md"]
    assert seen["opened"] == {"top.md": "ok", "open/e.md": "ok", "peek/c.md": "Permission denied"}
    assert seen["unlisted"] == {"closed": "cannot be listed (Permission denied)",
                                "peek/inner": "cannot be listed (Permission denied)"}


def test_the_file_time_budget_skips_a_slow_file_with_its_reason(metis, base_name, tmp_path, monkeypatch):
    kb = write_files(tmp_path / "kb", GOOD)
    (kb / "slow.md").write_text("# Part\n\nSome words here.\n\n" * 100_000, encoding="utf-8")
    # The budget grows by 3 s per MB the file holds (issue 26): here only the base budget is tested.
    monkeypatch.setenv("METIS_FILE_TIME_PER_MB_S", "0")

    by_argument = metis.index(base_name, kb, file_time_budget_s=0.5)
    monkeypatch.setenv("METIS_FILE_TIME_BUDGET_S", "0.000001")
    by_setting = metis.index(base_name, kb)

    assert [(f.path, f.reason) for f in by_argument.failed] == [
        ("slow.md", f"{kb / 'slow.md'}: took longer than 0.5 s to read: skipped")
    ]
    assert by_argument.new == 2
    assert [f.reason for f in by_setting.failed] == [f"{kb / 'slow.md'}: took longer than 1e-06 s to read: skipped"]
    assert by_setting.unchanged == 2
