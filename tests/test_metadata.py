"""Document metadata and the typed filters (issue 21, part 1), on real files.

Markdown front matter (PyYAML, safe loading), an HTML page's ``<meta>`` and ``<html lang>``, a
real PDF made by fpdf2 with document information, a real DOCX made by python-docx with core
properties, and the file's modification time: read by each reader, stored in typed columns,
filtered inside both legs through Python, the CLI, HTTP and MCP, carried by each citation,
listed by ``metis ls`` and shown by the analyst views.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import docx
import httpx
import psycopg
import pytest
from fpdf import FPDF
from mcp import Client, StdioServerParameters

import metis_pg
from metis_pg import service
from metis_pg.chunking import chunk_document
from metis_pg.errors import InvalidInput
from metis_pg.readers import read_document

from cli_runner import METIS_SCRIPT, run_cli
from corpus import write_corpus

LEAVE_MD = """---
title: Leave policy
tags: [HR, Policy]
author: Ada Lovelace
category: handbook
date: 2024-03-05
status: final
version: 3
reviewers: [Bob, Carol]
---
# Vacation

Staff get 25 days of paid vacation; the policy on leave is binding.
"""
BROKEN_MD = """---
title: Expenses
tags: [finance, policy
---
# Expenses policy

Keep every receipt of the policy expenses for thirty days.
"""
DRAFT_MD = """---
tags: [hr, draft]
author: Bob
date: 2021-01-10
status: draft
---
Draft policy on remote work leave: two days a week at home.
"""
PLAIN_TXT = "The router policy: restart the router weekly.\n"
PAGE_HTML = """<!doctype html><html lang="fr"><head><title>Radium</title>
<meta name="author" content="Marie Curie"><meta name="keywords" content="Science, radium">
<meta property="article:published_time" content="2022-05-04T10:00:00Z"></head>
<body><main><p>Radium policy: radium glows in the dark laboratory.</p></main></body></html>
"""


def write_pdf(path: Path) -> Path:
    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("helvetica", size=12)
    pdf.cell(text="Ferry policy: the ferry timetable for the summer season.")
    pdf.set_author("Grace Hopper")
    pdf.set_keywords("ferry, Timetable")
    pdf.set_subject("transport")
    pdf.set_lang("en-GB")
    pdf.set_creation_date(dt.datetime(2023, 6, 1, 10, 0, tzinfo=dt.timezone.utc))
    pdf.output(str(path))
    return path


def write_docx(path: Path) -> Path:
    document = docx.Document()
    document.add_paragraph("Router policy: routers must be restarted every week by the network team.")
    props = document.core_properties
    props.author = "Linus"
    props.category = "ops"
    props.keywords = "network; Routers"
    props.created = dt.datetime(2022, 1, 2, 3, 4, 5)
    props.language = "de-CH"
    document.save(str(path))
    return path


def write_kb(folder: Path) -> Path:
    write_corpus(folder, {"guide/leave.md": LEAVE_MD, "guide/expenses.md": BROKEN_MD,
                          "drafts/remote.md": DRAFT_MD, "notes/router.txt": PLAIN_TXT, "web/radium.html": PAGE_HTML})
    write_pdf(folder / "ferry.pdf")
    (folder / "ops").mkdir()
    write_docx(folder / "ops/routers.docx")
    stamp = dt.datetime(2020, 7, 1, 12, 0, tzinfo=dt.timezone.utc).timestamp()
    for path in folder.rglob("*.*"):  # a file with no date of its own (txt, broken front matter): its mtime counts
        os.utime(path, (stamp, stamp))
    return folder


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_kb(tmp_path_factory.mktemp("meta") / "kb")


@pytest.fixture(scope="module")
def base(metis: metis_pg.Metis, kb: Path) -> Iterator[str]:
    name = f"t-meta-{uuid.uuid4().hex[:8]}"
    report = metis.index(name, kb)
    assert report.new == 7 and not report.failed and report.chunks_without_vector == 0, report
    assert any("guide/expenses.md" in w and "front matter is not valid YAML" in w for w in report.warnings), \
        report.warnings
    yield name
    metis.drop_base(name)


def documents_of(metis: metis_pg.Metis, base: str, question: str = "policy", mode: str = "hybrid",
                 **filters) -> set[str]:
    answer = metis.search(base, question, mode=mode, top_k=20, rerank=False, filters=filters)
    return {r.citation.document for r in answer.results}


# -- readers --------------------------------------------------------------------------------


def test_readers_give_each_kinds_metadata(kb):
    md = read_document(kb / "guide/leave.md")
    assert (md.title, md.meta.tags, md.meta.author, md.meta.category) == (
        "Leave policy", ("hr", "policy"), "Ada Lovelace", "handbook")
    assert md.meta.date == dt.datetime(2024, 3, 5, tzinfo=dt.timezone.utc)
    assert md.meta.extra == {"status": "final", "version": 3, "reviewers": ["Bob", "Carol"]}
    chunks = chunk_document(md, chunk_size=1200)
    assert all("Ada Lovelace" not in c.text and "tags:" not in c.text for c in chunks)  # front matter in no chunk

    broken = read_document(kb / "guide/expenses.md")
    assert broken.meta.tags == () and broken.title == "Expenses"
    assert any(str(kb / "guide/expenses.md") in w and "not valid YAML" in w for w in broken.warnings)
    assert "Keep every receipt" in chunk_document(broken, chunk_size=1200)[0].text

    html = read_document(kb / "web/radium.html")
    assert (html.meta.tags, html.meta.author, html.meta.language) == (("science", "radium"), "Marie Curie", "fr")
    assert html.meta.date == dt.datetime(2022, 5, 4, 10, tzinfo=dt.timezone.utc)

    pdf = read_document(kb / "ferry.pdf")
    assert (pdf.meta.tags, pdf.meta.author, pdf.meta.language) == (("ferry", "timetable"), "Grace Hopper", "en-gb")
    assert pdf.meta.date == dt.datetime(2023, 6, 1, 10, tzinfo=dt.timezone.utc)
    assert pdf.meta.extra["subject"] == "transport"

    word = read_document(kb / "ops/routers.docx")
    assert (word.meta.tags, word.meta.author, word.meta.category, word.meta.language) == (
        ("network", "routers"), "Linus", "ops", "de-ch")
    assert word.meta.date == dt.datetime(2022, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)


def test_unsafe_yaml_is_never_constructed(tmp_path):
    evil = tmp_path / "evil.md"
    evil.write_text("---\ntitle: x\npwn: !!python/object/apply:os.system ['touch pwned']\n---\nBody text.\n")
    doc = read_document(evil)
    assert doc.meta.extra == {} and any("not valid YAML" in w for w in doc.warnings)
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


# -- stored, and filtered inside both legs -----------------------------------------------------------


def test_metadata_is_stored_and_shown_by_the_analyst_view(metis, base, dsn):
    with psycopg.connect(dsn) as conn:
        rows = {r[0]: r[1:] for r in conn.execute(
            "SELECT document, tags, author, category, date, modified_at, language, meta FROM metis.documents"
            " WHERE base = %s", (base,))}
        cited = conn.execute("SELECT DISTINCT tags, author, date FROM metis.chunk_citations_v4"
                             " WHERE base = %s AND document = 'guide/leave.md'", (base,)).fetchall()
    assert rows["guide/leave.md"][:4] == (["hr", "policy"], "Ada Lovelace", "handbook",
                                          dt.datetime(2024, 3, 5, tzinfo=dt.timezone.utc))
    assert rows["guide/leave.md"][6] == {"status": "final", "version": 3, "reviewers": ["Bob", "Carol"]}
    assert rows["notes/router.txt"][4] == dt.datetime(2020, 7, 1, 12, tzinfo=dt.timezone.utc)
    assert rows["ops/routers.docx"][5] == "de-ch" and rows["web/radium.html"][5] == "fr"
    assert rows["guide/expenses.md"][:3] == ([], None, None)  # malformed front matter: indexed, no metadata
    assert cited == [(["hr", "policy"], "Ada Lovelace", dt.datetime(2024, 3, 5, tzinfo=dt.timezone.utc))]


@pytest.mark.parametrize("mode", ["keyword", "dense", "hybrid"])
def test_every_filter_holds_in_every_mode(metis, base, mode):
    def found(**filters) -> set[str]:
        return documents_of(metis, base, mode=mode, **filters)

    everything = found()
    assert "guide/leave.md" in everything and "drafts/remote.md" in everything
    assert found(tags_any=["HR"]) <= {"guide/leave.md", "drafts/remote.md"} and "guide/leave.md" in found(tags_any=["hr"])
    assert found(tags_all=["hr", "draft"]) == {"drafts/remote.md"}
    assert "drafts/remote.md" not in found(exclude_tags=["draft"]) and "guide/leave.md" in found(exclude_tags=["draft"])
    assert found(authors=["Ada Lovelace"]) == {"guide/leave.md"}
    assert found(categories=["ops"]) == {"ops/routers.docx"}
    assert found(since="2023-01-01") == {"guide/leave.md", "ferry.pdf"}
    assert found(until="2021-01-10") == {"drafts/remote.md", "notes/router.txt", "guide/expenses.md"}  # by mtime
    assert found(since="2021-01-10", until="2021-01-10") == {"drafts/remote.md"}  # until: the whole day
    assert not found(exclude_prefixes=["guide/", "drafts/"]) & {"guide/leave.md", "guide/expenses.md",
                                                                 "drafts/remote.md"}
    assert found(meta={"status": "final"}) == {"guide/leave.md"}
    assert found(meta=["version=3", "reviewers=Carol"]) == {"guide/leave.md"}  # a number, a list member
    assert found(meta={"status": "final"}, authors=["Bob"]) == set()


def test_citations_carry_tags_date_and_author_and_bad_filters_are_refused(metis, base):
    answer = metis.search(base, "paid vacation", mode="keyword", top_k=1, filters={"tags_any": ["policy"]})
    c = answer.results[0].citation
    assert (c.document, c.tags, c.author, c.date) == (
        "guide/leave.md", ("hr", "policy"), "Ada Lovelace", dt.datetime(2024, 3, 5, tzinfo=dt.timezone.utc))
    assert answer.results[0].to_dict()["citation"]["date"] == "2024-03-05T00:00:00+00:00"
    nothing = metis.search(base, "vacation", mode="keyword", filters={"tags_any": ["no-such-tag"]})
    assert not nothing.results and [w.code for w in nothing.warnings] == ["FILTERS_MATCH_NOTHING"]
    assert "tags any no-such-tag" in nothing.warnings[0].message
    for bad in ({"since": "last tuesday"}, {"since": "2024-02-01", "until": "2024-01-01"}, {"meta": ["status"]},
                {"tag": ["hr"]}):
        with pytest.raises(InvalidInput):
            metis.search(base, "vacation", filters=bad)


def test_metis_ls_shows_and_filters_metadata(dsn, base):
    listed = run_cli("ls", base, "--tag", "hr", "--json", "--dsn", dsn)
    assert listed.code == 0, listed.stderr
    rows = {d["document"]: d for d in listed.json()}
    assert set(rows) == {"guide/leave.md", "drafts/remote.md"}
    assert rows["guide/leave.md"]["tags"] == ["hr", "policy"] and rows["guide/leave.md"]["author"] == "Ada Lovelace"
    assert rows["guide/leave.md"]["date"].startswith("2024-03-05")
    text = run_cli("ls", base, "--since", "2023-01-01", "--exclude", "ferry", "--dsn", dsn)
    assert text.code == 0 and "guide/leave.md" in text.stdout and "ferry.pdf" not in text.stdout
    assert "2024-03-05" in text.stdout and "by Ada Lovelace" in text.stdout and "#hr" in text.stdout


def test_metis_search_cli_filters(dsn, base):
    result = run_cli("search", base, "policy", "--mode", "keyword", "--tags-all", "hr,draft", "--json", "--dsn", dsn)
    assert result.code == 0, result.stderr
    assert {r["citation"]["document"] for r in result.json()["results"]} == {"drafts/remote.md"}
    result = run_cli("search", base, "policy", "--mode", "keyword", "--tag", "hr", "--exclude-tag", "draft",
                     "--author", "Ada Lovelace", "--category", "handbook", "--since", "2024-01-01",
                     "--until", "2024-12-31", "--meta", "status=final", "--json", "--dsn", dsn)
    assert result.code == 0, result.stderr
    [hit] = result.json()["results"]
    assert hit["citation"]["document"] == "guide/leave.md" and hit["citation"]["tags"] == ["hr", "policy"]
    bad = run_cli("search", base, "policy", "--since", "yesterday", "--dsn", dsn)
    assert bad.code != 0 and "since" in bad.stderr


def test_http_filters_and_citation(metis, base):
    app = service.create_app(metis, tokens=["meta-token-0123456789abcdef"])
    with service.running(app) as url, httpx.Client(base_url=url, timeout=60,
                                                   headers={"Authorization": "Bearer meta-token-0123456789abcdef"}) as client:
        response = client.post("/search", json={"bases": [base], "question": "policy", "mode": "keyword",
                                                "filters": {"tags_any": ["hr"], "exclude_tags": ["draft"],
                                                            "since": "2024-01-01", "meta": {"version": 3}}})
        assert response.status_code == 200, response.text
        [hit] = response.json()["results"]
        assert hit["citation"]["document"] == "guide/leave.md"
        assert (hit["citation"]["tags"], hit["citation"]["author"]) == (["hr", "policy"], "Ada Lovelace")
        bad = client.post("/search", json={"bases": [base], "question": "policy", "filters": {"since": "soon"}})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_REQUEST", bad.text


def test_mcp_filters(dsn, base):
    env = {k: v for k, v in os.environ.items() if k.startswith(("METIS_", "PYTHON", "XDG_"))}
    params = StdioServerParameters(command=str(METIS_SCRIPT), args=["mcp", "--dsn", dsn], env=env)

    async def session() -> None:
        async with Client(params) as client:
            result = await client.call_tool("search", {"question": "policy", "bases": [base], "mode": "keyword",
                                                       "tags": ["hr"], "authors": ["Bob"], "until": "2022-01-01"})
            assert not result.is_error, result.content
            found = result.structured_content or json.loads(result.content[0].text)
            assert [r["document"] for r in found["results"]] == ["drafts/remote.md"]
            assert found["results"][0]["tags"] == ["hr", "draft"] and found["results"][0]["author"] == "Bob"

    anyio.run(session)


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_authors_filter_finds_every_author_of_a_list(metis, tmp_path, mode):
    """`authors: [Bo, Cy]`: `--author Cy` keeps the document too, not only its first author.

    Before, the filter compared the first author only (``documents.author``), so a document's second
    author found nothing while ``--meta authors=Cy`` found it.
    """
    folder = write_corpus(tmp_path / "kb", {
        "runbook.md": "---\ntitle: Router runbook\nauthors: [Bo, Cy]\n---\n# Router\n\nReset the router on error E4021.\n",
        "other.md": "---\nauthor: Dee\n---\n# Other\n\nThe router of the other office.\n",
    })
    name = f"t-authors-{uuid.uuid4().hex[:8]}"
    metis.index(name, folder)
    try:
        assert documents_of(metis, name, "router", mode, authors=["Bo"]) == {"runbook.md"}
        assert documents_of(metis, name, "router", mode, authors=["Cy"]) == {"runbook.md"}
        assert documents_of(metis, name, "router", mode, authors=["Cy", "Dee"]) == {"runbook.md", "other.md"}
        assert documents_of(metis, name, "router", mode, authors=["Ed"]) == set()
        assert [d.document for d in metis.documents(name, filters={"authors": ["Cy"]})] == ["runbook.md"]
    finally:
        metis.drop_base(name)
