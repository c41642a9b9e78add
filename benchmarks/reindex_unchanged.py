"""Re-index time of an unchanged corpus (SPEC F3): what `metis index` costs when nothing changed.

Writes N made-up Markdown documents (default 20, about 2,500 characters each,
three sections), indexes them once into a fresh base with the bundled model,
then re-indexes the unchanged folder R times and prints, for each:

- the API call ``Metis.index`` (hash every file, compare with the stored hash,
  skip; no reading, chunking or embedding), median and max in ms;
- the whole command ``metis index FOLDER --base B`` in a new process (Python
  start, imports, connection, the same work), median and max in s.

Usage::

    python benchmarks/reindex_unchanged.py                       # throwaway embedded server
    python benchmarks/reindex_unchanged.py --documents 20 --repeats 5 --dsn postgresql://...

With no ``--dsn`` the embedded PostgreSQL starts in a temporary folder deleted at
the end; with ``--dsn`` the benchmark works in its own base (``bench-<random>``),
dropped at the end.
"""

from __future__ import annotations

import argparse
import atexit
import os
import platform
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from metis_pg.config import Settings
import metis_pg
from metis_pg import db, migrate

WORDS = (
    "policy team budget review schedule release server backup invoice contract meeting report customer "
    "network storage update request approval deadline project office travel expense training account "
    "access password incident support ticket vendor license audit quarter summary planning"
).split()


def write_corpus(folder: Path, documents: int, chars: int, seed: int = 7) -> None:
    """Write `documents` Markdown files of about `chars` characters in three sections each."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(documents):
        parts = [f"# Document {i}\n"]
        for section in ("Overview", "Details", "Follow-up"):
            words = [rng.choice(WORDS) for _ in range(chars // 3 // 7)]
            parts.append(f"## {section}\n\n{' '.join(words).capitalize()}.\n")
        (folder / f"doc{i:02d}.md").write_text("\n".join(parts), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=20)
    parser.add_argument("--chars", type=int, default=2500, help="characters per document (about)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dsn", default=None, help="PostgreSQL URL; default: a throwaway embedded server")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="metis-reindex-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)  # runs after the server's own atexit stop
    dsn = args.dsn or db.embedded_dsn(work / "pgdata")
    migrate.upgrade(dsn, settings=Settings.from_env())
    folder = work / "corpus"
    write_corpus(folder, args.documents, args.chars)
    base = f"bench-{uuid.uuid4().hex[:8]}"

    m = metis_pg.Metis(dsn)
    try:
        first = m.index(base, folder)
        print(f"first index: {first.new} documents, {first.chunks} chunks embedded in {first.seconds:.1f} s")
        api_ms = []
        for _ in range(args.repeats):
            report = m.index(base, folder)
            assert (report.unchanged, report.read, report.chunks_embedded) == (args.documents, 0, 0), report
            api_ms.append(report.seconds * 1000)
        command = [sys.executable, "-m", "metis_pg.cli", "index", str(folder), "--base", base, "--dsn", dsn, "--json"]
        cli_s = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True)
            cli_s.append(time.perf_counter() - t0)
    finally:
        m.drop_base(base)
        m.close()

    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"command: python benchmarks/reindex_unchanged.py {' '.join(shlex.quote(a) for a in sys.argv[1:])}".rstrip())
    print(f"re-index of {args.documents} unchanged documents ({first.chunks} chunks), {args.repeats} runs:")
    print(f"  Metis.index (API):         median {statistics.median(api_ms):.0f} ms, max {max(api_ms):.0f} ms")
    print(f"  metis index (new process): median {statistics.median(cli_s):.2f} s, max {max(cli_s):.2f} s")


if __name__ == "__main__":
    main()
