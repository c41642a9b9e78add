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

from raw_files import docx_bytes

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
