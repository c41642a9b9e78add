"""Read and chunk time of pathological inputs (issue 13): is each linear in the file's size?

For each case of ``tests/test_pathological.py`` (a Markdown heading line of
spaces, 40,000 fences, HTML tag soup, 100,000 .docx paragraphs, ...) written at
SCALE times its test size (default 0.25 and 1: about 250 KB and 1 MB), prints
the seconds ``read_document`` + ``chunk_document`` take and the ratio between
the two sizes: about the ratio of sizes (4) when linear, its square (16) when quadratic.

Usage::

    python benchmarks/pathological_inputs.py                 # every case, sizes x0.25 and x1
    python benchmarks/pathological_inputs.py --scales 1 4 --only html
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from raw_files import docx_bytes
from test_pathological import CASES

from metis_pg.chunking import chunk_document
from metis_pg.readers import read_document


def scaled(data: bytes, scale: float) -> bytes:
    """Return `data` cut or repeated to ``scale`` times its length (keeping its last 64 bytes: closers)."""
    size = int(len(data) * scale)
    if size <= len(data):
        return data[: max(0, size - 64)] + data[-64:]
    body = data[:-64] * (size // len(data) + 1)
    return body[: size - 64] + data[-64:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=float, nargs="+", default=[0.25, 1.0])
    parser.add_argument("--only", default="", help="run the cases whose name holds this text")
    args = parser.parse_args()
    print(f"# python {platform.python_version()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"{'case':42} " + " ".join(f"{'x' + format(s, 'g'):>16}" for s in args.scales) + "   ratio")
    with tempfile.TemporaryDirectory() as folder:
        for name, (file_name, data) in CASES.items():
            if args.only not in name:
                continue
            cells, times = [], []
            for scale in args.scales:
                # a .docx is a zip: scaled by writing more paragraphs, not by repeating bytes
                payload = docx_bytes(int(100_000 * scale)) if file_name.endswith(".docx") else scaled(data, scale)
                path = Path(folder) / file_name
                path.write_bytes(payload)
                started = time.perf_counter()
                chunk_document(read_document(path))
                seconds = time.perf_counter() - started
                times.append(seconds)
                cells.append(f"{len(payload) / 1e6:5.2f} MB {seconds:6.2f} s")
            ratio = f"{times[-1] / times[0]:6.1f}" if len(times) > 1 and times[0] > 0 else ""
            print(f"{name:42} " + " ".join(f"{c:>16}" for c in cells) + f"   {ratio}", flush=True)


if __name__ == "__main__":
    main()
