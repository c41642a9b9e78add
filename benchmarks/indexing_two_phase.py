"""Time to the first keyword answer and time to ready of a first `metis index` (issue 14).

Indexes a folder into a fresh base with the bundled model while a second thread
asks a keyword question every 50 ms; prints

- the time from the start of indexing to the first keyword search that finds
  something, and to the moment every document is in the base (searchable by
  its words; two-phase indexing writes every document's words before it embeds);
- the time to the end of the run (status ``ready``), chunks and chunks/s;
- the load average (``uptime``) before and after, since the machine is shared.

The default folder is the README demo's: this repository's ``docs/`` and
``README.md``. To compare with the code before two-phase indexing, run the same
command with that checkout first on ``PYTHONPATH`` (the benchmark uses only
``Metis.index`` and ``Metis.search``).

``--jsonl FILE --limit N`` indexes the first N records of a shared set's
``corpus.jsonl`` instead, one ``.txt`` document each (title and text; an
msmarco passage is one chunk). ``--stop-when-searchable`` interrupts the run
(as Ctrl-C does) once every document is searchable by keyword, and prints how
many vectors were kept: for thousands of chunks, where the run to ready takes
many minutes.

Usage::

    python benchmarks/indexing_two_phase.py                                   # docs/ + README.md
    python benchmarks/indexing_two_phase.py ../shared/data/gno-bench-fixture/corpus
    python benchmarks/indexing_two_phase.py FOLDER --query word --dsn postgresql://...
    python benchmarks/indexing_two_phase.py --jsonl ../shared/data/agentset-msmarco/corpus.jsonl --limit 1000
    python benchmarks/indexing_two_phase.py --jsonl ../shared/data/agentset-msmarco/corpus.jsonl \
        --limit 5000 --stop-when-searchable

With no ``--dsn`` the embedded PostgreSQL starts in a temporary folder deleted at
the end; with ``--dsn`` the benchmark works in its own base, dropped at the end.
"""

from __future__ import annotations

import _thread
import argparse
import atexit
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from metis_pg.config import Settings
import metis_pg
from metis_pg import db, migrate
from metis_pg.readers import kind_of

REPO = Path(__file__).resolve().parents[1]


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"load average {os.getloadavg()}"


def a_word_of(paths: list[Path]) -> str:
    """A word of 7+ letters from the first Markdown or text file under `paths` (the keyword question)."""
    for path in paths:
        files = sorted(path.rglob("*")) if path.is_dir() else [path]
        for f in files:
            if f.suffix in (".md", ".txt") and f.is_file():
                words = re.findall(r"[A-Za-z]{7,}", f.read_text(encoding="utf-8", errors="replace"))
                if words:
                    return words[0].lower()
    return "the"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*", help="files and folders to index (default: docs/ and README.md)")
    parser.add_argument("--query", default=None, help="keyword question (default: a word of the first file)")
    parser.add_argument("--dsn", default=None, help="PostgreSQL URL; default: a throwaway embedded server")
    parser.add_argument("--jsonl", type=Path, default=None, help="a corpus.jsonl to index (one document a record)")
    parser.add_argument("--limit", type=int, default=1000, help="records of --jsonl indexed (default 1000)")
    parser.add_argument("--stop-when-searchable", action="store_true",
                        help="interrupt the run once every document is searchable by keyword")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="metis-twophase-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)  # runs after the server's own atexit stop
    if args.jsonl:
        folder = work / "corpus"
        folder.mkdir()
        with args.jsonl.open(encoding="utf-8") as f:
            for i, line in zip(range(args.limit), f):
                record = json.loads(line)
                text = "\n\n".join(x for x in (record.get("title"), record.get("text")) if x)
                (folder / f"doc{i:05d}.txt").write_text(text, encoding="utf-8")
        paths = [folder]
    else:
        paths = [Path(p) for p in args.paths] or [REPO / "docs", REPO / "README.md"]
    query = args.query or a_word_of(paths)
    dsn = args.dsn or db.embedded_dsn(work / "pgdata")
    migrate.upgrade(dsn, settings=Settings.from_env())
    base = f"bench-{uuid.uuid4().hex[:8]}"
    load_before = uptime()

    m = metis_pg.Metis(dsn)
    asker = metis_pg.Metis(dsn)
    m.create_base(base)
    m.embedder(metis_pg.BaseSpec.from_json(m._base_row(base).spec)).embed_passages(["warm up"])  # model loaded
    first_answer: dict[str, float] = {}
    files = sum(1 for p in paths for f in (p.rglob("*") if p.is_dir() else [p])
                if f.is_file() and kind_of(f.name) and not any(part.startswith(".") for part in f.parts))
    stop = threading.Event()
    started = time.perf_counter()

    def ask() -> None:
        while not stop.is_set():
            try:
                if "s" not in first_answer and asker.search(base, query, mode="keyword", top_k=1).results:
                    first_answer["s"] = time.perf_counter() - started
                with asker.pool.connection() as conn:
                    documents = conn.execute("SELECT count(*) FROM documents d JOIN bases b USING (base_id)"
                                             " WHERE b.name = %s", (base,)).fetchone()[0]
                if documents >= first_answer.get("documents", files):
                    first_answer["all_s"] = time.perf_counter() - started
                    if args.stop_when_searchable:
                        _thread.interrupt_main()  # as Ctrl-C
                    return
            except metis_pg.MetisError:
                pass
            time.sleep(0.05)

    poller = threading.Thread(target=ask, daemon=True)
    report = None
    try:
        poller.start()
        try:
            report = m.index(base, *paths)
        except KeyboardInterrupt:
            if not args.stop_when_searchable:
                raise
        ready_s = time.perf_counter() - started
        if report is not None:
            first_answer["documents"] = report.new  # files not read (failed, other kinds) are not waited for
        poller.join(5)
        stop.set()
        with m.pool.connection() as conn:
            chunks, vectors = conn.execute(
                "SELECT (SELECT count(*) FROM chunks c JOIN bases b USING (base_id) WHERE b.name = %(b)s),"
                " (SELECT count(*) FROM embeddings e JOIN bases b USING (base_id) WHERE b.name = %(b)s)",
                {"b": base}).fetchone()
    finally:
        stop.set()
        m.drop_base(base)
        asker.close()
        m.close()

    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"metis_pg: {Path(metis_pg.__file__).parent}")
    print(f"command: python benchmarks/indexing_two_phase.py {' '.join(shlex.quote(a) for a in sys.argv[1:])}".rstrip())
    print(f"uptime before: {load_before}")
    print(f"uptime after:  {uptime()}")
    if report is None:
        print(f"interrupted once every document was searchable: {chunks} chunks, {vectors} vectors kept")
    else:
        print(f"indexed {report.new} documents, {report.chunks} chunks ({report.chunks_embedded} embedded),"
              f" status {report.status}")
    shown = f"{first_answer['s']:.1f} s" if "s" in first_answer else "never during the run"
    print(f"first keyword answer ({query!r}): {shown}")
    every = f"{first_answer['all_s']:.1f} s" if "all_s" in first_answer else "only at the end"
    print(f"every document searchable by keyword: {every}")
    if report is None:
        print(f"interrupted at {ready_s:.1f} s ({vectors / ready_s:.1f} vectors/s until then)")
    else:
        print(f"ready: {ready_s:.1f} s ({report.chunks / ready_s:.1f} chunks/s)")


if __name__ == "__main__":
    main()
