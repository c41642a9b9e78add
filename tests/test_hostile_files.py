"""Hostile and malformed files (issue 26): what the readers say, and what they cost.

- a .docx whose parts are declared with the wrong content type says which part
  and what it is declared as (it said "corrupt .docx (AttributeError: ...)");
"""

from __future__ import annotations

import io
import zipfile

import pytest

from metis_pg.errors import UnreadableDocument
from metis_pg.readers import read_document

from raw_files import docx_bomb, docx_bytes

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
WML = "application/vnd.openxmlformats-officedocument.wordprocessingml."


def rewrite(data: bytes, replace: dict[str, tuple[bytes, bytes]], add: dict[str, bytes] | None = None) -> bytes:
    """`data` (a zip) with bytes replaced in some entries and entries added."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = src.read(info.filename)
            if info.filename in replace:
                body = body.replace(*replace[info.filename])
            dst.writestr(info.filename, body)
        for name, body in (add or {}).items():
            dst.writestr(name, body)
    return out.getvalue()


def styled_docx(styles_type: str | None) -> bytes:
    """A .docx whose first paragraph has a style from word/styles.xml, declared `styles_type` (None: by default)."""
    styles = (f'<?xml version="1.0"?><w:styles xmlns:w="{W}"><w:style w:type="paragraph" w:styleId="H1">'
              '<w:name w:val="heading 1"/></w:style></w:styles>').encode()
    rels = (b'<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
            b'<Relationship Id="rId9" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles"'
            b' Target="styles.xml"/></Relationships>')
    replace = {"word/document.xml": (b"<w:p><w:r><w:t>Paragraph 0",
                                     b'<w:p><w:pPr><w:pStyle w:val="H1"/></w:pPr><w:r><w:t>Paragraph 0')}
    if styles_type is not None:
        override = f'<Override PartName="/word/styles.xml" ContentType="{styles_type}"/></Types>'.encode()
        replace["[Content_Types].xml"] = (b"</Types>", override)
    return rewrite(docx_bytes(3), replace, {"word/styles.xml": styles, "word/_rels/document.xml.rels": rels})


def test_a_docx_with_a_styles_part_declared_wrongly_says_which_part(tmp_path):
    good = tmp_path / "good.docx"
    good.write_bytes(styled_docx(WML + "styles+xml"))
    assert read_document(good).sections[0].headings == ("Paragraph 0 of the long report.",)
    for declared in (None, WML + "numbering+xml", WML + "header+xml"):
        path = tmp_path / "wrong_ct.docx"
        path.write_bytes(styled_docx(declared))
        with pytest.raises(UnreadableDocument) as caught:
            read_document(path)
        message = caught.value.message
        shown = "application/xml" if declared is None else declared
        assert message == (f"{path}: corrupt .docx: [Content_Types].xml declares word/styles.xml (styles) as "
                           f"'{shown}', not {WML}styles+xml"), message
        assert "Error" not in message and "_Element" not in message


def test_a_docx_whose_main_part_is_not_a_word_document_says_so(tmp_path):
    path = tmp_path / "wrong_ct.docx"
    path.write_bytes(rewrite(docx_bytes(3), {"[Content_Types].xml": (b"document.main+xml", b"template.main+xml")}))
    with pytest.raises(UnreadableDocument, match=r"wrong_ct.docx: corrupt .docx: \[Content_Types\].xml declares "
                                                 r"word/document.xml as '.*template.main\+xml', not a Word document"):
        read_document(path)
    path.write_bytes(rewrite(docx_bytes(3), {"word/document.xml": (b"w:document", b"w:styles")}))
    with pytest.raises(UnreadableDocument, match=r"corrupt .docx: word/document.xml holds <styles>, not a Word "
                                                 r"document \(<w:document>\)"):
        read_document(path)


# -- memory and time per file (item 6) -----------------------------------------------------


def test_a_docx_part_inflating_like_a_zip_bomb_is_refused_before_parsing(tmp_path):
    path = tmp_path / "bomb.docx"
    path.write_bytes(docx_bomb(xml_mb=20))
    with pytest.raises(UnreadableDocument, match=r"zip bomb\? word/document.xml inflates [\d,]+ bytes to "
                                                 r"20,000,\d+, over 100 times"):
        read_document(path)


def test_one_paragraph_too_large_to_hold_is_refused(tmp_path, monkeypatch):
    from metis_pg.readers import docx as reader

    monkeypatch.setattr(reader, "MAX_BLOCK_ELEMENTS", 1_000)
    runs = "".join(f"<w:r><w:t>word {i}</w:t></w:r>" for i in range(600))  # 1,200 elements in one paragraph
    path = tmp_path / "wide.docx"
    path.write_bytes(rewrite(docx_bytes(2), {"word/document.xml": (b"<w:body>", f"<w:body><w:p>{runs}</w:p>".encode())}))
    with pytest.raises(UnreadableDocument, match="one paragraph or table holds over 1,000 XML elements"):
        read_document(path)
    monkeypatch.setattr(reader, "MAX_BLOCK_ELEMENTS", 10_000)
    assert "word 599" in read_document(path).text


def test_a_page_too_large_for_a_tree_is_read_as_a_stream(tmp_path, monkeypatch):
    from metis_pg.readers import html as reader

    page = ("<html><head><title>Big</title><style>p {}</style></head><body><h1>Top</h1>\n"
            + "".join(f"<h2>Part {i}</h2>\n<p>Paragraph {i} &amp; more</p>\n<table><tr><td>a{i}</td><td>b{i}</td>"
                      "</tr></table>\n" for i in range(50))
            + "<pre>  kept\n    as is</pre></body></html>")
    path = tmp_path / "big.html"
    path.write_text(page, encoding="utf-8")
    tree = read_document(path)
    monkeypatch.setattr(reader, "MAX_TREE_CHARS", 100)
    stream = read_document(path)
    assert stream.title == tree.title == "Big"
    assert [(s.headings, s.text, s.line) for s in stream.sections] == [
        (s.headings, s.text, s.line) for s in tree.sections]
    assert stream.sections[1].text == "a0 | b0" and stream.sections[1].headings == ("Top", "Part 0")
    assert "read as a stream" in stream.warnings[0]


def test_the_time_budget_grows_with_what_the_file_holds(tmp_path):
    from metis_pg.chunking import chunk_document
    from metis_pg.readers import TimeBudgetExceeded, time_budget

    path = tmp_path / "big.txt"
    path.write_text("A line about the harbour lantern and the ships.\n" * 200_000, encoding="utf-8")  # 9.6 MB

    def read(**rates):
        with time_budget(0.001, str(path), **rates):
            return chunk_document(read_document(path))

    with pytest.raises(TimeBudgetExceeded, match=r"big.txt: took longer than 0.001 s to read: skipped"):
        read(per_mb_s=0)
    assert read(per_mb_s=60)  # 0.001 s + 60 s per MB: it reads to the end


# -- reading a file once, safely (items 2 and 3) ---------------------------------------------


def test_a_fifo_is_refused_at_once_not_opened_for_ever(tmp_path):
    import os
    import time

    fifo = tmp_path / "notes.txt"
    os.mkfifo(fifo)  # no writer: a blocking open would wait for ever
    started = time.monotonic()
    with pytest.raises(UnreadableDocument, match=r"notes.txt: a FIFO \(named pipe\), not a regular file: skipped"):
        read_document(fifo)
    assert time.monotonic() - started < 5


def test_a_read_blocked_in_the_kernel_is_given_up_within_the_budget(tmp_path, monkeypatch):
    import threading
    import time

    from metis_pg.readers import files, time_budget

    path = tmp_path / "stalled.txt"
    path.write_text("text on a stalled network file system", encoding="utf-8")
    release = threading.Event()
    real_read = files.os.read

    def stalled(fd, n):  # a read that does not return, as on a hung NFS mount
        release.wait(30)
        return real_read(fd, n)

    monkeypatch.setattr(files.os, "read", stalled)
    started = time.monotonic()
    try:
        with time_budget(0.5, str(path)), pytest.raises(UnreadableDocument, match="reading did not finish within"):
            read_document(path)
    finally:
        release.set()
    assert time.monotonic() - started < 5


def test_a_file_that_became_a_link_is_not_followed(tmp_path):
    from metis_pg.readers import read_file_once

    target = tmp_path / "secret.txt"
    target.write_text("secret", encoding="utf-8")
    link = tmp_path / "notes.txt"
    link.symlink_to(target)
    with pytest.raises(UnreadableDocument, match="became a symbolic link after the folder was listed"):
        read_file_once(str(link), max_bytes=1000)
    assert read_document(link).text == "secret"  # read_document follows a link it is given, then opens the target
