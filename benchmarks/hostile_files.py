"""Peak memory and time of reading and chunking one big or hostile file (issue 26, item 6).

Each case is written to a temporary folder, then read and chunked as ``metis
index`` does (``read_document`` + ``chunk_document`` under the per-file time
budget of the settings, :func:`metis_pg.readers.time_budget`) in a fresh Python
process of its own, which reports its seconds, its peak resident memory
(``VmHWM``) and what it made of the file (chunks, or the reason it was
skipped). The goal: a peak of at most 500 MB for any file under the 20 MB
``max_file_bytes``, and a big honest file read to the end.

Cases: ``docx-bomb`` (a .docx of ~0.5 MB whose document.xml inflates to 190 MB),
``docx-100k`` (100,000 honest paragraphs, 6.8 MB of XML), ``docx-xml-190mb`` (190 MB
of XML that inflates like Word's, so it passes the zip-bomb checks), ``html-8mb`` (8 MB of
paragraphs and table rows), ``pdf-pages`` (``--pdf-pages`` pages, one paragraph
each), ``txt-19mb``.

Usage::

    python benchmarks/hostile_files.py                     # every case
    python benchmarks/hostile_files.py --only docx --pdf-pages 10000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from raw_files import docx_big_xml, docx_bomb, docx_bytes  # noqa: E402

CHILD = r"""
import json, sys, time

def hwm_mb():  # peak resident memory of this process (VmHWM; ru_maxrss would carry the parent's over exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
from metis_pg.chunking import chunk_document
from metis_pg.config import Settings
from metis_pg.readers import read_document, time_budget
from metis_pg.errors import UnreadableDocument
path = sys.argv[1]
before = hwm_mb()
started = time.perf_counter()
try:
    with time_budget(Settings().file_time_budget_s, path):
        chunks = chunk_document(read_document(path))
    outcome = f"{len(chunks)} chunks"
except UnreadableDocument as exc:
    outcome = "skipped: " + exc.message.split(": ", 1)[1]
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "peak_mb": hwm_mb(), "imports_mb": before, "outcome": outcome}))
"""


def html_8mb() -> bytes:
    parts = ["<html><head><title>Big page</title></head><body><h1>Big page</h1>"]
    size, i = 0, 0
    while size < 8_000_000:
        piece = (f"<h2>Part {i}</h2><p>Paragraph {i} says something about item {i * 7} and its neighbours.</p>"
                 f"<table><tr><td>cell {i}</td><td>value {i * 3}</td></tr></table>")
        parts.append(piece)
        size += len(piece)
        i += 1
    return ("".join(parts) + "</body></html>").encode()


def pdf_pages(pages: int) -> bytes:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("helvetica", size=11)
    for i in range(pages):
        pdf.add_page()
        pdf.multi_cell(0, 6, f"Page {i + 1}. The quarterly report describes item {i} and what followed from it. " * 4)
    return bytes(pdf.output())


def txt_19mb() -> bytes:
    line = "A plain line of text about the harbour lantern and the ships that pass it at night.\n"
    return (line * (19_000_000 // len(line))).encode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run the cases whose name holds this text")
    parser.add_argument("--pdf-pages", type=int, default=2000)
    args = parser.parse_args()
    cases = {
        "docx-bomb": ("bomb.docx", docx_bomb),
        "docx-100k": ("honest.docx", lambda: docx_bytes(100_000)),
        "docx-xml-190mb": ("big.docx", docx_big_xml),
        "html-8mb": ("big.html", html_8mb),
        f"pdf-{args.pdf_pages}-pages": ("pages.pdf", lambda: pdf_pages(args.pdf_pages)),
        "txt-19mb": ("big.txt", txt_19mb),
    }
    print(f"# python {platform.python_version()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"{'case':18} {'file':>9} {'seconds':>8} {'peak MB':>8} {'imports MB':>10}  outcome")
    with tempfile.TemporaryDirectory() as folder:
        for name, (file_name, make) in cases.items():
            if args.only not in name:
                continue
            path = Path(folder) / file_name
            path.write_bytes(make())
            done = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True,
                                  timeout=3600)
            if done.returncode != 0:
                print(f"{name:18} failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{name:18} {path.stat().st_size / 1e6:7.2f}MB {r['seconds']:8.1f} {r['peak_mb']:8.0f} "
                  f"{r['imports_mb']:10.0f}  {r['outcome']}", flush=True)
            path.unlink()
    print(f"# load after {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
