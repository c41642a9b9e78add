"""Files written byte by byte for the tests of hostile input (not a test module).

:func:`raw_pdf` writes a one-page PDF by hand (so its /Info strings and its
content stream can be anything), :func:`docx_bytes` a minimal .docx of many
paragraphs (python-docx takes seconds to write 100,000).
"""

from __future__ import annotations

import io
import zipfile


def raw_pdf(
    content: bytes, info: bytes = b"", *, to_unicode: bytes | None = None, stream_filter: bytes = b"",
    no_pages: bool = False,
) -> bytes:
    """A one-page PDF written byte by byte: `content` is its content stream, `info` its /Info entries.

    `to_unicode`: a ToUnicode CMap for its font; `stream_filter`: e.g. ``b"/FlateDecode"`` declared for
    the content stream (whatever `content` holds); `no_pages`: the page tree lists no page.
    """
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica" + (b" /ToUnicode 7 0 R" if to_unicode else b"") + b" >>"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [] /Count 0 >>" if no_pages else b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >>"
         b" /Contents 5 0 R >>"),
        font,
        b"<< /Length %d%s >>\nstream\n" % (len(content), b" /Filter " + stream_filter if stream_filter else b"")
        + content + b"\nendstream",
        b"<< " + info + b" >>",
    ]
    if to_unicode:
        objects.append(b"<< /Length %d >>\nstream\n" % len(to_unicode) + to_unicode + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info 6 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


#: A ToUnicode map sending glyph "A" to a lone surrogate and "B" to NUL.
SURROGATE_CMAP = (
    b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /Bad def\n"
    b"1 begincodespacerange <00> <FF> endcodespacerange\n"
    b"2 beginbfchar <41> <D800> <42> <0000> endbfchar\n"
    b"endcmap CMapName currentdict /CMap defineresource pop end end"
)


def docx_bytes(paragraphs: int, *, merged_rows: int = 0) -> bytes:
    """A minimal .docx of `paragraphs` short paragraphs (written as XML: python-docx is slow), then
    with `merged_rows` a two-column table whose first column is one cell merged down all its rows."""
    body = "".join(f"<w:p><w:r><w:t>Paragraph {i} of the long report.</w:t></w:r></w:p>" for i in range(paragraphs))
    if merged_rows:  # then a table whose first column is one cell merged down `merged_rows` rows
        rows = "".join(
            "<w:tr><w:tc><w:tcPr><w:vMerge" + (' w:val="restart"' if i == 0 else "") + "/></w:tcPr>"
            + ("<w:p><w:r><w:t>Merged</w:t></w:r></w:p>" if i == 0 else "<w:p/>") + "</w:tc>"
            f"<w:tc><w:p><w:r><w:t>row {i}</w:t></w:r></w:p></w:tc></w:tr>"
            for i in range(merged_rows)
        )
        body += f"<w:tbl><w:tblGrid><w:gridCol/><w:gridCol/></w:tblGrid>{rows}</w:tbl>"
    document = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
        f"<w:body>{body}</w:body></w:document>"
    )
    types = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        '<Override PartName="/word/document.xml"'
        ' ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
        "</Types>"
    )
    rels = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument"'
        ' Target="word/document.xml"/></Relationships>'
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", types)
        archive.writestr("_rels/.rels", rels)
        archive.writestr("word/document.xml", document)
    return out.getvalue()


def docx_of(document_xml: bytes) -> bytes:
    """A .docx whose word/document.xml is `document_xml` (the parts of ``raw_files.docx_bytes``)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(docx_bytes(1))) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = document_xml if info.filename == "word/document.xml" else src.read(info.filename)
            dst.writestr(info.filename, body)
    return out.getvalue()


def docx_bomb(xml_mb: int = 190) -> bytes:
    head = (b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document '
            b'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>')
    paragraph = b"<w:p><w:r><w:t>Lorem ipsum dolor sit amet, consectetur adipiscing elit.</w:t></w:r></w:p>"
    body = paragraph * (xml_mb * 1_000_000 // len(paragraph))
    return docx_of(head + body + b"</w:body></w:document>")


def docx_big_xml(xml_mb: int = 190) -> bytes:
    """An honest-looking .docx of `xml_mb` MB of XML that inflates like Word's (varied words): it passes
    the zip-bomb checks, so its memory is the streaming parser's."""
    import random

    rng = random.Random(7)
    words = [f"w{rng.randint(0, 999)}" for _ in range(300)]
    head = (b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document '
            b'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>')
    run = '<w:r><w:rPr><w:rFonts w:ascii="Calibri" w:hAnsi="Calibri"/><w:sz w:val="22"/></w:rPr><w:t>{}</w:t></w:r>'
    paragraphs = [('<w:p><w:pPr><w:spacing w:after="160" w:line="259" w:lineRule="auto"/></w:pPr>'
                   + "".join(run.format(" ".join(rng.choices(words, k=4))) for _ in range(2)) + "</w:p>").encode()
                  for _ in range(4_000)]
    block = b"".join(paragraphs)
    return docx_of(head + block * (xml_mb * 1_000_000 // len(block)) + b"</w:body></w:document>")
