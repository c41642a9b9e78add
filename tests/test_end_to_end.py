"""End to end on real documents with the real bundled model: ten of the gno docs
(../shared/data/gno-bench-fixture/corpus, Markdown) indexed through the public API,
searched in every mode.

The questions are ours; each names the document that answers it. The ten are the
smaller documents (about 110 KB: the suite's one real-model indexing, about a
minute on 2 cores); the others test the same code paths at four times the cost.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest
from fpdf import FPDF

import metis_pg
from metis_pg import service

from cli_runner import run_cli
from corpus import write_corpus

QUESTIONS = {
    "how hybrid search works": "HOW-SEARCH-WORKS.md",
    "query expansion with HyDE": "HOW-SEARCH-WORKS.md",
    "skip initial sync of the daemon": "DAEMON.md",
    "Windows desktop beta": "WINDOWS.md",
    "frontmatter relations in structured query syntax": "SYNTAX.md",
    "mlx_lm fuse --export-gguf fails": "FINE-TUNED-MODELS.md",
    "packaging support tiers": "PACKAGING.md",
}
DOCUMENTS = (
    "HOW-SEARCH-WORKS.md", "DAEMON.md", "WINDOWS.md", "SYNTAX.md", "FINE-TUNED-MODELS.md", "PACKAGING.md",
    "DESKTOP-BETA-ROLLOUT.md", "GLOSSARY.md", "QUICKSTART.md", "INSTALLATION.md",
)


@pytest.fixture(scope="session")
def gno_base(metis: metis_pg.Metis, shared_data: Path, tmp_path_factory: pytest.TempPathFactory):
    corpus = tmp_path_factory.mktemp("gno")
    for document in DOCUMENTS:
        shutil.copyfile(shared_data / "gno-bench-fixture" / "corpus" / document, corpus / document)
    name = "e2e-gno"
    report = metis.index(name, corpus)
    assert report.read == len(DOCUMENTS) and report.new == len(DOCUMENTS) and not report.failed
    assert report.chunks == report.chunks_embedded > 100
    assert report.status == "ready"
    yield name, corpus
    metis.drop_base(name)


@pytest.mark.parametrize("mode", ["hybrid", "dense", "keyword"])
def test_known_questions_find_their_document_in_every_mode(metis, gno_base, mode):
    name, _ = gno_base
    misses = []
    for question, document in QUESTIONS.items():
        answer = metis.search(name, question, mode=mode, top_k=3)
        assert answer.mode == mode and len(answer.results) == 3
        if document not in [r.citation.document for r in answer.results]:
            misses.append(question)
    assert misses == []


def test_hybrid_puts_the_answer_first(metis, gno_base):
    name, _ = gno_base
    firsts = {q: metis.search(name, q, top_k=1).results[0].citation.document for q in QUESTIONS}
    assert firsts == QUESTIONS


def test_citations_point_at_the_passage_in_the_file(metis, gno_base):
    name, corpus = gno_base
    checked = 0
    for question in QUESTIONS:
        for r in metis.search(name, question, top_k=5).results:
            lines = (corpus / r.citation.document).read_text(encoding="utf-8").split("\n")
            first_line, last_line = r.text.split("\n")[0].strip(), r.text.split("\n")[-1].strip()
            c = r.citation
            assert c.line is not None and c.page is None
            assert first_line[:40] in lines[c.line_start - 1], (c.document, c.line_start)
            assert last_line[-40:] in lines[c.line_end - 1], (c.document, c.line_end)
            assert c.line_start <= c.line <= c.line_end
            # The cited line is a line of the passage that the snippet shows words of.
            cited = lines[c.line - 1].strip()
            assert cited and cited in r.text
            assert set(cited.split()) & set(c.snippet.replace("…", " ").split()), (c.document, c.line, c.snippet)
            assert r.citation.title and r.citation.kind == "md"
            assert len(r.citation.snippet) <= 240
            checked += 1
    assert checked == 5 * len(QUESTIONS)


def test_headings_path_names_the_section(metis, gno_base):
    name, _ = gno_base
    r = metis.search(name, "query expansion with HyDE", top_k=1).results[0]
    assert r.citation.title == "How Search Works"
    assert "Query Expansion with HyDE" in r.citation.headings


def test_path_prefix_filter_on_real_documents(metis, gno_base):
    name, _ = gno_base
    for mode in ("hybrid", "dense", "keyword"):
        answer = metis.search(name, "install the desktop app", mode=mode, top_k=5,
                              filters={"path_prefix": "WIN"})
        assert len(answer.results) == 5
        assert {r.citation.document for r in answer.results} == {"WINDOWS.md"}


def test_reindexing_an_unchanged_corpus_skips_every_document(metis, gno_base):
    name, corpus = gno_base
    before = metis.base(name)
    report = metis.index(name, corpus)
    assert (report.unchanged, report.new, report.changed, report.deleted, report.chunks_embedded) == (
        len(DOCUMENTS), 0, 0, 0, 0)
    after = metis.base(name)
    assert (after.documents, after.chunks, after.chunks_without_vector) == (before.documents, before.chunks, 0)


# -- the cited line: the line (page) of the snippet's sentence, and the passage's range ---------------


def test_a_long_passage_cites_the_line_of_its_answer_not_its_first_line(metis, base_name, tmp_path):
    filler = [f"Step {n}: check rack {n} cabling." for n in range(1, 31)]
    text = "# Runbook\n\n" + "\n".join(filler) + "\nThe escrow passphrase rotates every ninety days.\n"
    metis.index(base_name, write_corpus(tmp_path / "kb", {"runbook.md": text}))
    answer = metis.search(base_name, "escrow passphrase", mode="keyword", top_k=1)
    c = answer.results[0].citation
    assert (c.line, c.line_start, c.line_end) == (33, 3, 33)
    assert c.to_dict()["line"] == 33 and (c.to_dict()["line_start"], c.to_dict()["line_end"]) == (3, 33)
    assert "page" not in c.to_dict() and "page_start" not in c.to_dict()
    assert c.location() == "runbook.md:33"


def test_an_html_citation_names_the_source_line_of_the_sentence(metis, base_name, tmp_path):
    page = (
        "<!DOCTYPE html>\n<html>\n<head><title>Ops</title></head>\n<body>\n<h1>Ops</h1>\n"
        "<p>The first paragraph\nruns over two lines.</p>\n"
        "<ul>\n<li>One item</li>\n<li>Another item</li>\n</ul>\n"
        "<p>Backups run nightly.\nRestores are tested\nweekly. The vault\nfailover drill is quarterly.</p>\n"
        "</body>\n</html>\n"
    )
    metis.index(base_name, write_corpus(tmp_path / "kb", {"ops.html": page}))
    c = metis.search(base_name, "vault failover drill", mode="keyword", top_k=1).results[0].citation
    source = page.split("\n")
    assert "The vault" in source[c.line - 1], (c.line, source[c.line - 1])
    assert source[c.line_start - 1].startswith("<p>The first paragraph")
    assert "failover drill is quarterly" in source[c.line_end - 1]


def _two_page_pdf(path: Path) -> None:
    pdf = FPDF()
    pdf.set_font("helvetica", size=12)
    for body in ("Chapter one covers the boiler room.", "Chapter two: the sprinkler valve is red."):
        pdf.add_page()
        pdf.multi_cell(0, 8, body)
    pdf.output(str(path))


def test_a_pdf_citation_names_the_page_and_the_range_in_python_cli_and_http(metis, base_name, tmp_path, dsn):
    folder = tmp_path / "kb"
    folder.mkdir()
    _two_page_pdf(folder / "manual.pdf")
    metis.index(base_name, folder)
    c = metis.search(base_name, "sprinkler valve", mode="keyword", top_k=1).results[0].citation
    assert (c.page, c.page_start, c.page_end, c.line) == (2, 2, 2, None)
    want = {"page": 2, "page_start": 2, "page_end": 2}
    cli = run_cli("search", base_name, "sprinkler valve", "--mode", "keyword", "--top-k", "1", "--json", "--dsn", dsn)
    assert cli.code == 0, cli.stderr
    got = cli.json()["results"][0]["citation"]
    assert {k: got.get(k) for k in want} == want and "line" not in got and "line_start" not in got
    with service.running(service.create_app(metis, tokens=[], source_roots=[])) as url:
        response = httpx.post(f"{url}/search", json={"bases": base_name, "question": "sprinkler valve",
                                                       "mode": "keyword", "top_k": 1}, timeout=60)
    assert response.status_code == 200, response.text
    got = response.json()["results"][0]["citation"]
    assert {k: got.get(k) for k in want} == want and got.get("line") is None


def test_http_and_cli_json_give_the_cited_line_and_the_range(metis, base_name, tmp_path, dsn):
    text = "\n".join(f"Line {n} is filler text." for n in range(1, 6)) + "\nThe pager rota is on the wiki.\n"
    metis.index(base_name, write_corpus(tmp_path / "kb", {"rota.txt": text}))
    want = {"line": 6, "line_start": 1, "line_end": 6}
    cli = run_cli("search", base_name, "pager rota", "--mode", "keyword", "--top-k", "1", "--json", "--dsn", dsn)
    assert cli.code == 0, cli.stderr
    assert {k: cli.json()["results"][0]["citation"].get(k) for k in want} == want
    with service.running(service.create_app(metis, tokens=[], source_roots=[])) as url:
        response = httpx.post(f"{url}/search", json={"bases": base_name, "question": "pager rota",
                                                       "mode": "keyword", "top_k": 1}, timeout=60)
    assert response.status_code == 200, response.text
    assert {k: response.json()["results"][0]["citation"].get(k) for k in want} == want
