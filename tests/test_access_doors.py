"""Who may read what through every front door (issue 21, part 2): HTTP and the console's API, MCP over
HTTP and stdio, the CLI. The principals come from the bearer token's groups (``METIS_API_TOKENS``
entries ``TOKEN=group+group``) or ``--as``; nothing a request says can widen them.

The base is tests/test_access.py's (``kb``): a document readable only by ``hr`` must never reach
``eng`` — not its text, title, path, snippet, citation nor a count.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import anyio
import httpx
import pytest

from metis_pg import service

from cli_runner import METIS_SCRIPT, run_cli
from test_access import MODES, SECRET, _leaks, kb  # noqa: F401  (kb: the module's fixture)

ENG = "eng-token-" + "e" * 24
HR = "hr-token-" + "h" * 24
NOBODY = "no-group-token-" + "n" * 24
ADMIN = "ops-token-" + "o" * 24


@pytest.fixture(scope="module")
def url(metis, kb):  # noqa: F811
    app = service.create_app(metis, tokens=[f"{ENG}=eng", f"{HR}=hr+legal", NOBODY, f"{ADMIN}=ops"],
                             source_roots=[kb.root])
    with service.running(app) as base_url:
        yield base_url


def _client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def _documents(answer: dict) -> set[str]:
    return {r["citation"]["document"] for r in answer["results"]}


@pytest.mark.parametrize("mode", MODES)
def test_http_search_answers_for_the_tokens_groups_only(url, kb, mode):  # noqa: F811
    body = {"bases": [kb.name], "question": f"payroll {SECRET} salary", "mode": mode, "top_k": 20}
    with _client(url, ENG) as eng, _client(url, HR) as hr, _client(url, NOBODY) as nobody:
        seen = eng.post("/search", json=body).json()
        assert _documents(seen) <= {"handbook.md", "payroll-faq.md", "front.md"}
        assert not _leaks({**seen, "question": None})
        assert "salaries.md" in _documents(hr.post("/search", json=body).json())
        assert _documents(nobody.post("/search", json=body).json()) <= {"handbook.md", "payroll-faq.md", "front.md"}
        compared = eng.post("/compare", json={"bases": [kb.name], "question": f"payroll {SECRET}", "top_k": 20}).json()
        assert compared["passages"] and not _leaks({**compared, "question": None})


def test_principals_cannot_be_forged_over_http(url, kb):  # noqa: F811
    body = {"bases": [kb.name], "question": SECRET, "mode": "keyword", "top_k": 20}
    with _client(url, ENG) as eng:
        refused = eng.post("/search", json={**body, "principals": ["hr"]})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "INVALID_REQUEST"
        for extra in ({"X-Metis-Principals": "hr"}, {"X-Forwarded-User": "hr"}, {"Cookie": "metis_principals=hr"}):
            answer = eng.post("/search", json=body, headers=extra, params={"principals": "hr", "as": "hr"}).json()
            assert "salaries.md" not in _documents(answer) and not _leaks({**answer, "question": None})
    # A token with groups glued on is not a token.
    for token in (f"{ENG}=hr", f"{ENG} hr", f"{NOBODY}=hr"):
        with _client(url, token) as forged:
            assert forged.post("/search", json=body).status_code == 401


def test_the_console_reads_through_the_same_routes_with_the_same_token(url, kb):  # noqa: F811
    # The console's pages hold no data (answered without a token); its searches are POST /search with
    # the token the user typed, so what it shows is what the token's groups may read.
    page = httpx.get(f"{url}/console/search", timeout=30)
    assert page.status_code in (200, 404) and SECRET not in page.text
    with _client(url, ENG) as eng:
        answer = eng.post("/search", json={"bases": [kb.name], "question": SECRET, "top_k": 5}).json()
        assert "salaries.md" not in _documents(answer)


def test_http_index_jobs_give_their_sources_readers(url, kb, metis, tmp_path_factory):  # noqa: F811
    folder = kb.root / f"jobs-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    (folder / "memo.md").write_text(f"# Memo\n\nThe board memo {SECRET}board.\n")
    # A token without groups indexes (a token with groups changes nothing: the next test).
    with _client(url, NOBODY) as writer, _client(url, ADMIN) as admin, _client(url, ENG) as eng:
        bad = writer.post(f"/bases/{kb.name}/index", json={"paths": [str(folder)], "readers": ["not a group"]})
        assert bad.status_code == 400
        job = writer.post(f"/bases/{kb.name}/index", json={"paths": [str(folder)], "readers": ["ops"]}).json()
        deadline = time.monotonic() + 120
        while (state := writer.get(f"/jobs/{job['id']}").json())["state"] not in ("done", "failed"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert state["state"] == "done", state
        body = {"bases": [kb.name], "question": f"board memo {SECRET}board", "mode": "keyword"}
        assert "memo.md" in _documents(admin.post("/search", json=body).json())
        assert "memo.md" not in _documents(eng.post("/search", json=body).json())


def test_a_token_with_groups_changes_nothing(url, kb, metis):  # noqa: F811
    """A token with groups could index hr's folder again without its readers (or as a new source) and
    then read it: every change is refused to it (403 FORBIDDEN), and the hr document stays hidden."""
    body = {"bases": [kb.name], "question": f"payroll {SECRET} salary", "mode": "keyword"}
    with _client(url, ENG) as eng:
        assert "salaries.md" not in _documents(eng.post("/search", json=body).json())
        refused = [
            eng.post(f"/bases/{kb.name}/index", json={"paths": [str(kb.root / "hr")], "readers": []}),
            eng.post(f"/bases/{kb.name}/index", json={"paths": [str(kb.root / "narrow")],
                                                      "front_matter_readers": False}),
            eng.post("/bases", json={"name": f"t-eng-{uuid.uuid4().hex[:6]}"}),
            eng.delete(f"/bases/{kb.name}"),
            eng.post(f"/bases/{kb.name}/notes", json={"title": "Memo", "text": "A note from eng."}),
            eng.delete(f"/bases/{kb.name}/notes/1"),
        ]
        for response in refused:
            assert response.status_code == 403, response.text
            assert response.json()["error"]["code"] == "FORBIDDEN", response.text
        assert "salaries.md" not in _documents(eng.post("/search", json=body).json())
    assert "salaries.md" in {d.document for d in metis.documents(kb.name)}  # the base is still whole
    assert "salaries.md" not in {d.document for d in metis.documents(kb.name, principals=["eng"])}


def _structured(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content or json.loads(result.content[0].text)


def test_mcp_over_http_reads_for_the_tokens_groups(url, kb):  # noqa: F811
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def session(token: str) -> dict:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
                found = {}
                for mode in MODES:
                    found[mode] = _structured(await client.call_tool(
                        "search", {"question": f"payroll {SECRET} salary", "bases": [kb.name], "mode": mode,
                                   "top_k": 20}))
                found["get"] = await client.call_tool("get", {"base": kb.name, "citation": "salaries.md"})
                for tool, arguments in (("list_bases", {}), ("status", {"base": kb.name})):
                    bases = _structured(await client.call_tool(tool, arguments))["bases"]
                    found[tool] = next(b["documents"] for b in bases if b["name"] == kb.name)
                listed = await client.list_resources()
                found["resources"] = [str(r.uri) for r in listed.resources]
                try:
                    read = await client.read_resource(f"metis://{kb.name}/salaries.md")
                    found["resource"] = " ".join(getattr(c, "text", "") for c in read.contents)
                except Exception as exc:  # the SDK raises the resource's error
                    found["resource"] = f"error: {exc}"
                return found

    eng = anyio.run(session, ENG)
    for mode in MODES:
        assert {r["document"] for r in eng[mode]["results"]} <= {"handbook.md", "payroll-faq.md", "front.md"}
        assert not _leaks({**eng[mode], "question": None})
    assert eng["get"].is_error and "NOT_FOUND" in eng["get"].content[0].text
    assert not _leaks(eng["resources"]) and any("handbook.md" in u for u in eng["resources"])
    assert eng["resource"].startswith("error") and SECRET not in eng["resource"]
    assert eng["list_bases"] == eng["status"] == 3  # the base's 7 documents counted for eng (all were, before)
    hr = anyio.run(session, HR)
    assert hr["list_bases"] == hr["status"] == 6  # hr+legal: + salaries.md, legal-only.md, both.md
    assert "salaries.md" in {r["document"] for r in hr["hybrid"]["results"]}
    assert not hr["get"].is_error and SECRET in hr["resource"]


def test_mcp_over_stdio_reads_as_the_groups_of_as(dsn, kb):  # noqa: F811
    from mcp import Client, StdioServerParameters

    env = {k: v for k, v in os.environ.items() if k.startswith(("METIS_", "PYTHON", "XDG_"))}
    params = StdioServerParameters(command=str(METIS_SCRIPT), args=["mcp", "--dsn", dsn, "--as", "eng"], env=env)

    async def session() -> tuple[dict, bool]:
        async with Client(params) as client:
            found = _structured(await client.call_tool(
                "search", {"question": f"payroll {SECRET}", "bases": [kb.name], "top_k": 20}))
            got = await client.call_tool("get", {"base": kb.name, "citation": "salaries.md"})
            return found, got.is_error

    found, refused = anyio.run(session)
    assert found["results"] and not _leaks({**found, "question": None}) and refused


@pytest.mark.parametrize("mode", MODES)
def test_cli_as_a_group_sees_what_the_group_may_read(dsn, kb, mode, monkeypatch):  # noqa: F811
    monkeypatch.setenv("METIS_DATABASE_URL", dsn)
    seen = run_cli("search", kb.name, f"payroll {SECRET} salary", "--mode", mode, "-n", "20", "--as", "eng",
                   "--json")
    assert seen.code == 0, seen.stderr
    answer = json.loads(seen.stdout)
    assert answer["results"] and not _leaks({**answer, "question": None})
    hr = json.loads(run_cli("search", kb.name, f"payroll {SECRET}", "--mode", mode, "-n", "20", "--as", "hr",
                            "--json").stdout)
    assert "salaries.md" in _documents(hr)


def test_cli_get_ls_and_index_readers(dsn, kb, monkeypatch, tmp_path: Path):  # noqa: F811
    monkeypatch.setenv("METIS_DATABASE_URL", dsn)
    refused = run_cli("get", kb.name, "salaries.md", "--as", "eng", "--json")
    assert refused.code != 0 and SECRET not in refused.stdout + refused.stderr
    assert SECRET in run_cli("get", kb.name, "salaries.md", "--as", "hr", "--json").stdout
    listed = run_cli("ls", kb.name, "--as", "eng", "--files")
    assert listed.code == 0 and "salaries.md" not in listed.stdout and "handbook.md" in listed.stdout
    assert "salaries.md" in run_cli("ls", kb.name, "--files").stdout  # the operator
    bad = run_cli("search", kb.name, "payroll", "--as", "h r")
    assert bad.code != 0
    folder = tmp_path / "cli-hr"
    folder.mkdir()
    (folder / "review.md").write_text(f"# Review\n\nThe review {SECRET}review.\n")
    done = run_cli("index", str(folder), "--base", kb.name, "--readers", "hr", "--json")
    assert done.code == 0, done.stderr
    eng = json.loads(run_cli("search", kb.name, f"{SECRET}review", "--mode", "keyword", "--as", "eng",
                             "--json").stdout)
    assert "review.md" not in _documents(eng)
    hr = json.loads(run_cli("search", kb.name, f"{SECRET}review", "--mode", "keyword", "--as", "hr",
                            "--json").stdout)
    assert "review.md" in _documents(hr)
