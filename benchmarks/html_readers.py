"""What the HTML reader keeps, on real pages: the PostgreSQL 15 manual (issue 14, "What the readers keep").

The pages are the Debian package's (``apt-get install postgresql-doc-15``:
``/usr/share/doc/postgresql-doc-15/html``), never copied into the repository;
the questions and judgments are ``benchmarks/pgdocs/pgdocs15.json`` (document-level
grades, the evaluator's JSON format: docs/evaluation.md). PAGES below are the
judged pages and distractors on nearby subjects (68 pages, ~0.7 M characters).

Prints, for the reader on ``PYTHONPATH`` (run it once with a checkout from before
the change first on the path to compare; it uses only public functions):

- reading: pages, chunks, **nav chunks** (holding the manual's navigation bar,
  ``Prev | Up | … | Home | Next``: the four words), nav chunks with little else
  (<= 40 words), chunks labelled by a box heading (Note, Tip, Warning, Caution,
  Important) whose text is not in such a box (the heading scope leaked), and the
  share of the main text's words kept (the page's words without its navigation
  header and footer, counted as a multiset);
- with ``--trafilatura``: the same share and nav count for trafilatura's
  ``extract()`` of each page (when the package imports), for comparison;
- searching (unless ``--no-search``): the pages indexed with the bundled model into
  a throwaway embedded PostgreSQL; nDCG@10, Recall@10 and MRR@10 per mode, and
  the dense top-10 places taken by nav chunks over all questions;
- the load (``uptime``) before and after: the machine is shared.

Usage::

    python benchmarks/html_readers.py                      # ~5-10 min on 2 cores (embedding)
    python benchmarks/html_readers.py --no-search          # reading only, seconds
    PYTHONPATH=/path/to/old/checkout python benchmarks/html_readers.py --json before.json
"""

from __future__ import annotations

import argparse
import atexit
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

from bs4 import BeautifulSoup

from metis_pg.config import Settings
import metis_pg
from metis_pg.chunking import chunk_document
from metis_pg.readers import read_document

HERE = Path(__file__).resolve().parent
SET = HERE / "pgdocs" / "pgdocs15.json"
HTML_DIRS = sorted(Path("/usr/share/doc").glob("postgresql-doc-*/html"))

PAGES = """
ddl-constraints sql-vacuum routine-vacuuming app-pgrestore backup-dump transaction-iso indexes-expressional
indexes-partial using-explain sql-explain sql-truncate sql-grant ddl-priv datatype-json tutorial-window
functions-window queries-with sql-listen sql-notify sql-copy runtime-config-connection sql-insert ddl-rowsecurity
sql-createpolicy runtime-config-client ddl-partitioning sql-refreshmaterializedview sql-lock sql-reindex ddl-alter
ddl-default sql-createtable
sql-update sql-delete sql-createindex sql-analyze sql-createrole sql-revoke datatype-numeric functions-aggregate
tutorial-join tutorial-transactions mvcc-intro explicit-locking indexes-types indexes-multicolumn indexes-unique
queries-order queries-limit backup-file ddl-inherit sql-begin sql-commit sql-rollback sql-set-transaction
textsearch-intro sql-createview sql-creatematerializedview rules-materializedviews sql-cluster sql-prepare ddl
indexes sql-commands tutorial-sql-intro sql-unlisten sql-discard sql-checkpoint sql-load
""".split()

NAV_WORDS = ("Prev", "Up", "Home", "Next")
BOX_HEADINGS = {"Note", "Tip", "Warning", "Caution", "Important"}
BOX_CLASSES = ["note", "tip", "warning", "caution", "important"]


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "uptime unavailable"


def is_nav(text: str) -> bool:
    words = set(re.findall(r"[A-Za-z]+", text))
    return all(w in words for w in NAV_WORDS)


def words(text: str) -> Counter[str]:
    return Counter(re.findall(r"\w+", text.lower()))


def reference(html: str) -> tuple[Counter[str], list[str]]:
    """The page's main words (body without the navigation header/footer) and its box texts (no whitespace)."""
    soup = BeautifulSoup(html, "html.parser")
    for tag in soup.select("div.navheader, div.navfooter, script, style, head"):
        tag.decompose()
    boxes = ["".join(b.get_text().split()) for b in soup.find_all("div", class_=BOX_CLASSES)]
    return words(soup.get_text(" ")), boxes


def kept(ref: Counter[str], got: Counter[str]) -> tuple[int, int]:
    return sum(min(n, got[w]) for w, n in ref.items()), sum(ref.values())


def reading(folder: Path, use_trafilatura: bool) -> dict:
    out = {"pages": 0, "chunks": 0, "nav_chunks": 0, "nav_only_chunks": 0, "box_labelled_chunks": 0,
           "box_label_leaks": 0, "main_words_kept": 0, "main_words": 0, "seconds": 0.0}
    traf = None
    if use_trafilatura:
        try:
            import trafilatura

            traf = {"nav_pages": 0, "main_words_kept": 0, "main_words": 0, "seconds": 0.0}
        except ImportError:
            print("trafilatura does not import: skipped", file=sys.stderr)
    for path in sorted(folder.glob("*.html")):
        html = path.read_text(encoding="utf-8")
        ref, boxes = reference(html)
        started = time.perf_counter()
        chunks = chunk_document(read_document(path))
        out["seconds"] += time.perf_counter() - started
        out["pages"] += 1
        out["chunks"] += len(chunks)
        got: Counter[str] = Counter()
        for c in chunks:
            got.update(words(c.text))
            got.update(words(" ".join(c.headings[-1:])))
            if is_nav(c.text):
                out["nav_chunks"] += 1
                if len(c.text.split()) <= 40:
                    out["nav_only_chunks"] += 1
            if c.headings and c.headings[-1] in BOX_HEADINGS:
                out["box_labelled_chunks"] += 1
                flat = "".join(c.text.split())  # no whitespace: inline tags space text differently
                if not any(flat[:60] in box for box in boxes):
                    out["box_label_leaks"] += 1
        k, n = kept(ref, got)
        out["main_words_kept"] += k
        out["main_words"] += n
        if traf is not None:
            started = time.perf_counter()
            text = trafilatura.extract(html, include_tables=True, include_comments=False, favor_recall=True) or ""
            traf["seconds"] += time.perf_counter() - started
            traf["nav_pages"] += is_nav(text)
            k, n = kept(ref, words(text))
            traf["main_words_kept"] += k
            traf["main_words"] += n
    out["main_words_kept_share"] = round(out["main_words_kept"] / max(1, out["main_words"]), 4)
    if traf is not None:
        traf["main_words_kept_share"] = round(traf["main_words_kept"] / max(1, traf["main_words"]), 4)
        out["trafilatura"] = traf
    return out


def searching(folder: Path, dsn: str | None, work: Path) -> dict:
    from metis_pg import db, migrate

    dsn = dsn or db.embedded_dsn(work / "pgdata")
    migrate.upgrade(dsn, settings=Settings.from_env())
    m = metis_pg.Metis(dsn)
    base = f"bench-pgdocs-{uuid.uuid4().hex[:6]}"
    try:
        started = time.perf_counter()
        report = m.index(base, folder)
        indexed_s = time.perf_counter() - started
        evaluation = m.evaluate(base, SET, modes=["hybrid", "dense", "keyword"], top_k=10)
        questions = json.loads(SET.read_text(encoding="utf-8"))["queries"]
        nav_places = 0
        for q in questions:
            answer = m.search(base, q["question"], mode="dense", top_k=10)
            nav_places += sum(is_nav(r.text) for r in answer.results)
        modes = {}
        for mode in ("hybrid", "dense", "keyword"):
            o = evaluation.mode(mode).overall
            modes[mode] = {"ndcg_at_10": round(o.ndcg_at_10, 4), "recall_at_10": round(o.recall_at_10, 4),
                           "mrr_at_10": round(o.mrr_at_10, 4)}
        return {"chunks": report.chunks, "index_seconds": round(indexed_s, 1), "questions": len(questions),
                "dense_top10_nav_places": nav_places, "dense_top10_places": 10 * len(questions), "modes": modes}
    finally:
        try:
            m.drop_base(base)
        finally:
            m.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--html-dir", type=Path, default=HTML_DIRS[-1] if HTML_DIRS else None,
                        help="the manual's html folder (default: the installed postgresql-doc-*)")
    parser.add_argument("--no-search", action="store_true", help="reading figures only (no database, no model)")
    parser.add_argument("--trafilatura", action="store_true", help="also measure trafilatura.extract()")
    parser.add_argument("--dsn", default=None, help="PostgreSQL URL; default: a throwaway embedded server")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    if args.html_dir is None or not args.html_dir.is_dir():
        sys.exit("no PostgreSQL manual: apt-get install postgresql-doc-15, or --html-dir")
    work = Path(tempfile.mkdtemp(prefix="metis-pgdocs-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    folder = work / "pages"
    folder.mkdir()
    missing = [p for p in PAGES if not (args.html_dir / f"{p}.html").is_file()]
    if missing:
        sys.exit(f"pages missing from {args.html_dir}: {', '.join(missing)}")
    for page in PAGES:
        shutil.copyfile(args.html_dir / f"{page}.html", folder / f"{page}.html")
    figures = {"reader": metis_pg.__file__, "load_before": uptime()}
    print(f"reader: {metis_pg.__file__}\nload before: {figures['load_before']}", flush=True)
    figures["reading"] = reading(folder, args.trafilatura)
    print(json.dumps(figures["reading"], indent=1), flush=True)
    if not args.no_search:
        figures["searching"] = searching(folder, args.dsn, work)
        print(json.dumps(figures["searching"], indent=1), flush=True)
    figures["load_after"] = uptime()
    print(f"load after: {figures['load_after']}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
