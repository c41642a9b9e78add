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

import pytest

import metis_pg

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
            first_line = r.text.split("\n")[0].strip()
            assert r.citation.line is not None and r.citation.page is None
            assert first_line[:40] in lines[r.citation.line - 1], (r.citation.document, r.citation.line)
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
