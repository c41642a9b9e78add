"""The HTTP service (SPEC F19) over real HTTP on 127.0.0.1: routes, auth, errors, bad requests, bounded load.

One service runs for the module, on a free port of 127.0.0.1, in front of the
session's database, with a bearer token and a source root in a temporary folder.
Its base is a small corpus indexed once (the bundled model embeds a few passages
a second).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

import httpx
import pytest

import metis_pg
from metis_pg import service
from metis_pg.errors import ConfigError

from corpus import write_corpus
from model_servers import FakeService, openai_embeddings

#: The ``metis`` console script next to this interpreter (``pip install -e .``).
METIS = Path(sys.executable).with_name("metis")
TOKEN = "test-token-" + "7" * 24
OTHER_TOKEN = "test-token-" + "8" * 24

CORPUS = {
    "orders.txt": "Purchase order PO-2231 was approved on Monday. Purchase orders need two signatures.",
    "router.txt": "Reset the router using the red button for ten seconds.",
    "modem.txt": "Error E4021 means the modem failed to authenticate.",
    "guide/leave.md": "# Handbook\n\n## Vacation\n\nFull-time staff get 25 days of paid vacation per calendar year.\n",
}

#: Strings that would break a query built by pasting text into SQL.
INJECTIONS = [
    "'; DROP TABLE chunks; --",
    "x' OR '1'='1",
    '" OR ""="',
    "1; DELETE FROM bases WHERE true; --",
    "') UNION SELECT name, spec::text FROM bases --",
    "%(base_id)s %s %% {0}",
    "$$; TRUNCATE postings; $$",
    "\\'; UPDATE bases SET status = 'waiting'; --",
    "a' ; SELECT pg_sleep(5); --",
    "../../etc/passwd",
]

TABLES = ("bases", "sources", "documents", "chunks", "embeddings", "posting_blocks", "block_lengths", "bm25_terms", "bm25_totals", "facts")


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A source root holding one folder ``kb`` (the corpus) and, beside the root, a folder it must not read."""
    top = tmp_path_factory.mktemp("service")
    root = top / "root"
    write_corpus(root / "kb", CORPUS)
    write_corpus(top / "outside", {"secret.txt": "The secret launch code is 0000."})
    return root


@pytest.fixture(scope="module")
def indexed_base(metis: metis_pg.Metis, roots: Path) -> Iterator[str]:
    name = f"t-svc-{uuid.uuid4().hex[:8]}"
    report = metis.index(name, roots / "kb")
    assert report.new == len(CORPUS) and not report.failed and report.chunks_without_vector == 0
    yield name
    metis.drop_base(name)


@pytest.fixture(scope="module")
def url(metis: metis_pg.Metis, roots: Path) -> Iterator[str]:
    # More searches at once than the bounded-load test sends: the bound itself has its own test.
    app = service.create_app(metis, tokens=[TOKEN, OTHER_TOKEN], source_roots=[roots], max_inflight_searches=16)
    with service.running(app) as base_url:
        yield base_url


@pytest.fixture()
def client(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as c:
        yield c


def assert_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert body["error"]["code"] == code, body
    assert body["error"]["message"]


def wait_for_job(client: httpx.Client, job_id: str, timeout_s: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        job = client.get(f"/jobs/{job_id}").json()
        if job["state"] in ("done", "failed"):
            return job
        assert time.monotonic() < deadline, f"job {job_id} still {job['state']} after {timeout_s} s"
        time.sleep(0.1)


def table_counts(metis: metis_pg.Metis) -> dict[str, int]:
    with metis.pool.connection() as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- routes --------------------------------------------------------------------


def test_healthz_answers_without_a_token(url):
    response = httpx.get(f"{url}/healthz")
    assert response.status_code == 200
    assert response.json()["status"] == "ok" and response.json()["database"] == "ok"


def test_search_answers_exactly_the_api_json(client, metis, indexed_base):
    body = {"bases": indexed_base, "question": "PO-2231 signatures", "mode": "keyword", "top_k": 3}
    response = client.post("/search", json=body)
    assert response.status_code == 200, response.text
    got = response.json()
    want = metis.search(indexed_base, "PO-2231 signatures", mode="keyword", top_k=3).to_dict()
    assert set(got) == set(want) == {"mode", "reranked", "bases", "fusion", "results", "warnings", "took"}
    assert set(got["took"]) == {"embed", "dense", "keyword", "fuse", "rerank", "total"}
    got.pop("took"), want.pop("took")
    assert got == want
    assert got["results"][0]["citation"]["document"] == "orders.txt"


def test_search_accepts_a_list_of_bases_and_filters(client, indexed_base):
    body = {
        "bases": [indexed_base], "question": "vacation days", "mode": "keyword", "top_k": 5,
        "filters": {"path_prefix": "guide/", "kinds": ["md"], "sources": ["kb"]},
    }
    response = client.post("/search", json=body)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert len(results) >= 1
    assert {r["citation"]["document"] for r in results} == {"guide/leave.md"}
    assert all(r["base"] == indexed_base for r in results)


def test_hybrid_search_over_http_scores_both_legs(client, indexed_base):
    response = client.post("/search", json={"bases": indexed_base, "question": "modem error E4021", "top_k": 2})
    assert response.status_code == 200, response.text
    top = response.json()["results"][0]
    assert top["citation"]["document"] == "modem.txt"
    assert {"dense", "dense_rank", "keyword", "keyword_rank", "fused"} <= set(top["scores"])


def test_bases_are_created_read_listed_and_dropped(client, base_name):
    created = client.post("/bases", json={"name": base_name, "chunk_size": 800})
    assert created.status_code == 201, created.text
    assert created.json()["name"] == base_name and created.json()["spec"]["chunk_size"] == 800
    assert client.get(f"/bases/{base_name}").json()["status"] == "ready"
    assert base_name in [b["name"] for b in client.get("/bases").json()["bases"]]
    status = client.get(f"/bases/{base_name}/status").json()
    assert status["name"] == base_name and status["documents"] == 0 and status["job"] is None
    assert_error(client.post("/bases", json={"name": base_name}), 409, "BASE_EXISTS")
    assert client.delete(f"/bases/{base_name}").json() == {"dropped": base_name}
    assert_error(client.get(f"/bases/{base_name}"), 404, "BASE_NOT_FOUND")


def test_create_base_refuses_api_key_settings_over_http(client, base_name):
    # A key's environment variable named by a caller could send the service's secrets to the caller's URL.
    response = client.post("/bases", json={"name": base_name, "embedding_api_key_env": "METIS_API_TOKENS"})
    assert_error(response, 400, "INVALID_REQUEST")
    assert_error(client.get(f"/bases/{base_name}"), 404, "BASE_NOT_FOUND")


def test_an_api_key_variable_the_operator_lists_may_be_named_over_http(metis, base_name, monkeypatch):
    monkeypatch.setenv("TEST_EOS_KEY", "k" * 24)
    embedder = FakeService(lambda path, body: openai_embeddings(body, 16))
    try:
        settings = metis_pg.Settings(api_tokens=TOKEN, model_url_allow_hosts=f"127.0.0.1:{embedder.port}",
                                     model_key_envs="TEST_EOS_KEY")
        app = service.create_app(metis, settings=settings)
        with service.running(app) as url, httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"},
                                                       timeout=30) as c:
            base = {"name": base_name, "embedding_model": "e", "embedding_dim": 16, "embedding_url": embedder.url}
            refused = c.post("/bases", json={**base, "embedding_api_key_env": "METIS_API_TOKENS"})
            assert_error(refused, 400, "INVALID_REQUEST")
            assert "METIS_MODEL_KEY_ENVS" in refused.json()["error"]["message"]
            created = c.post("/bases", json={**base, "embedding_api_key_env": "TEST_EOS_KEY"})
            assert created.status_code == 201, created.text
            assert c.post("/search", json={"bases": base_name, "question": "a question"}).status_code == 200
        assert embedder.requests and all(h["authorization"] == "Bearer " + "k" * 24 for _, h, _ in embedder.requests)
    finally:
        embedder.close()


def test_index_job_reads_a_folder_under_a_source_root_and_reports_progress(client, base_name, roots):
    write_corpus(roots / base_name, {"note.md": "# Kiosk\n\nThe kiosk code is QX-7781.\n", "b.txt": "Plain words."})
    started = client.post(f"/bases/{base_name}/index", json={"paths": [base_name]})
    assert started.status_code == 202, started.text
    assert started.headers["location"] == f"/jobs/{started.json()['id']}"
    job = wait_for_job(client, started.json()["id"])
    assert job["state"] == "done", job
    assert job["progress"] == {"documents_done": 2, "documents_total": 2, "chunks": 2}
    assert job["report"]["new"] == 2 and job["report"]["status"] == "ready"
    assert client.get(f"/bases/{base_name}/status").json()["job"]["id"] == job["id"]
    found = client.post("/search", json={"bases": base_name, "question": "QX-7781", "mode": "keyword"}).json()
    assert found["results"][0]["citation"]["document"] == "note.md"


def test_index_refuses_paths_outside_the_source_roots(client, base_name, roots):
    outside = roots.parent / "outside"
    (roots / f"{base_name}-dirlink").symlink_to(outside, target_is_directory=True)
    (roots / f"{base_name}-filelink.txt").symlink_to(outside / "secret.txt")
    tried = [
        "../outside",
        "kb/../../outside",
        str(outside),
        "/etc",
        f"{base_name}-dirlink",
        f"{base_name}-filelink.txt",
        f"{base_name}-dirlink/secret.txt",
        "no-such-folder",
        "",
    ]
    for path in tried:
        assert_error(client.post(f"/bases/{base_name}/index", json={"paths": [path]}), 400, "INVALID_REQUEST")
    assert_error(client.get(f"/bases/{base_name}"), 404, "BASE_NOT_FOUND")  # nothing was started or created


def test_index_through_http_is_refused_without_source_roots(metis, base_name, roots):
    app = service.create_app(metis, tokens=[TOKEN], source_roots=[])
    with service.running(app) as url:
        response = httpx.post(f"{url}/bases/{base_name}/index", json={"paths": [str(roots / "kb")]},
                              headers={"Authorization": f"Bearer {TOKEN}"})
    assert_error(response, 400, "INVALID_REQUEST")
    assert "METIS_SOURCE_ROOTS" in response.json()["error"]["message"]


def test_unknown_job_is_404(client):
    assert_error(client.get("/jobs/0123456789abcdef"), 404, "NOT_FOUND")


def test_openapi_schema_and_docs_page_are_served(url):
    schema = httpx.get(f"{url}/openapi.json").json()
    for path in ("/healthz", "/bases", "/bases/{name}", "/bases/{name}/status", "/bases/{name}/index",
                 "/jobs/{job_id}", "/search", "/compare", "/bases/{name}/notes", "/bases/{name}/facts"):
        assert path in schema["paths"], path
    assert "SearchIn" in schema["components"]["schemas"] and "ErrorOut" in schema["components"]["schemas"]
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    docs = httpx.get(f"{url}/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


def test_docs_page_loads_swagger_ui_from_the_service_not_a_cdn(url):
    import re

    page = httpx.get(f"{url}/docs").text
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page)
    assert "cdn" not in page and not [a for a in assets if "://" in a], assets
    assert set(assets) >= {"/docs/swagger-ui-bundle.js", "/docs/swagger-ui.css", "/docs/favicon.png"}
    assert '"validatorUrl": null' in page  # no badge fetched from validator.swagger.io
    for asset, media in (("/docs/swagger-ui-bundle.js", "javascript"), ("/docs/swagger-ui.css", "text/css"),
                         ("/docs/favicon.png", "image/png")):
        got = httpx.get(f"{url}{asset}")  # no token: the page must load where /docs does
        assert got.status_code == 200 and media in got.headers["content-type"], asset
        assert len(got.content) > 1000, asset
    # Swagger UI 5 renders the OpenAPI 3.1 schema FastAPI writes (4.x shows "no valid version field").
    assert re.search(r'"5\.\d+\.\d+"', httpx.get(f"{url}/docs/swagger-ui-bundle.js").text)
    assert httpx.get(f"{url}/openapi.json").json()["openapi"].startswith("3.1")


def test_notes_are_added_listed_searched_and_deleted(client, base_name):
    assert client.post("/bases", json={"name": base_name}).status_code == 201
    added = client.post(f"/bases/{base_name}/notes", json={"title": "Kiosk", "text": "The kiosk code is QX-9912."})
    assert added.status_code == 201, added.text
    note_id = added.json()["note_id"]
    assert added.json()["source"] == f"metis-{base_name}"
    assert [n["note_id"] for n in client.get(f"/bases/{base_name}/notes").json()["notes"]] == [note_id]
    found = client.post("/search", json={"bases": base_name, "question": "QX-9912", "mode": "keyword",
                                         "filters": {"sources": [f"metis-{base_name}"]}}).json()
    assert found["results"][0]["citation"]["source"] == f"metis-{base_name}"
    assert client.delete(f"/bases/{base_name}/notes/{note_id}").json() == {"deleted": note_id}
    assert client.get(f"/bases/{base_name}/notes").json()["notes"] == []
    assert_error(client.delete(f"/bases/{base_name}/notes/{note_id}"), 404, "NOT_FOUND")


def test_a_newer_fact_with_the_same_key_replaces_the_older(client, base_name):
    assert client.post("/bases", json={"name": base_name, "kind": "memory"}).status_code == 201
    old = client.post(f"/bases/{base_name}/facts", json={"text": "Ana leads the platform team.", "key": "ana/role"})
    new = client.post(f"/bases/{base_name}/facts", json={"text": "Ana is now the CTO.", "key": "ana/role"})
    assert old.status_code == new.status_code == 201, (old.text, new.text)
    facts = {f["fact_id"]: f for f in client.get(f"/bases/{base_name}/facts").json()["facts"]}
    assert facts[old.json()["fact_id"]]["holds"] is False
    assert facts[old.json()["fact_id"]]["superseded_by"] == new.json()["fact_id"]
    assert facts[new.json()["fact_id"]]["holds"] is True
    holding = client.get(f"/bases/{base_name}/facts", params={"holding_only": "true"}).json()["facts"]
    assert [f["fact_id"] for f in holding] == [new.json()["fact_id"]]
    answer = client.post("/search", json={"bases": base_name, "question": "Ana", "mode": "keyword"}).json()
    assert [r["holds"] for r in answer["results"]] == [True, False]


def test_facts_need_a_memory_base_and_notes_an_existing_one(client, indexed_base):
    assert_error(client.post(f"/bases/{indexed_base}/facts", json={"text": "A fact."}), 400, "INVALID_REQUEST")
    assert_error(client.post("/bases/no-such-base/notes", json={"title": "T", "text": "x"}), 404, "BASE_NOT_FOUND")
    assert_error(client.post("/bases/no-such-base/facts", json={"text": "x"}), 404, "BASE_NOT_FOUND")


def test_compare_ranks_each_passage_in_every_mode(client, indexed_base):
    response = client.post("/compare", json={"bases": indexed_base, "question": "PO-2231 signatures", "top_k": 3})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["passages"], body
    top = body["passages"][0]
    assert top["citation"]["document"] == "orders.txt"
    assert set(top["ranks"]) == {"hybrid", "dense", "keyword"} and top["why"]


# -- errors and bad requests -----------------------------------------------------


def test_requests_without_a_valid_token_are_401(url, indexed_base):
    body = {"bases": indexed_base, "question": "router"}
    for headers in ({}, {"Authorization": "Bearer wrong-token-0000000000000"}, {"Authorization": f"Basic {TOKEN}"},
                    {"Authorization": "Bearer"}, {"Authorization": TOKEN}, {"Authorization": f"Bearer {TOKEN}x"}):
        response = httpx.post(f"{url}/search", json=body, headers=headers)
        assert_error(response, 401, "UNAUTHORIZED")
        assert response.headers["www-authenticate"].startswith("Bearer")
    assert_error(httpx.get(f"{url}/bases"), 401, "UNAUTHORIZED")
    assert httpx.post(f"{url}/search", json=body, headers={"Authorization": f"Bearer {OTHER_TOKEN}"}).status_code == 200


BAD_SEARCHES = [
    ({"top_k": 0}, "top_k 0"),
    ({"top_k": 101}, "top_k 101"),
    ({"top_k": 10**30}, "top_k huge"),
    ({"top_k": "5"}, "top_k a string"),
    ({"top_k": 5.5}, "top_k a float"),
    ({"top_k": True}, "top_k a bool"),
    ({"question": ""}, "empty question"),
    ({"question": "x" * 2001}, "question over 2,000 characters"),
    ({"question": "a\u0000b"}, "NUL in the question"),
    ({"question": 42}, "question a number"),
    ({"mode": "fuzzy"}, "unknown mode"),
    ({"rerank": "yes"}, "rerank a string"),
    ({"bases": []}, "no base"),
    ({"bases": [f"b{i}" for i in range(21)]}, "21 bases"),
    ({"filters": {"kinds": ["exe"]}}, "unknown kind"),
    ({"filters": {"colour": "red"}}, "unknown filter"),
    ({"filters": {"path_prefix": 7}}, "path_prefix a number"),
    ({"filters": {"sources": "kb\u0000"}}, "NUL in a source"),
    ({"unexpected": 1}, "unknown field"),
]


@pytest.mark.parametrize("change,why", BAD_SEARCHES, ids=[w for _, w in BAD_SEARCHES])
def test_bad_search_requests_are_400(client, indexed_base, change, why):
    body = {"bases": indexed_base, "question": "router", "mode": "keyword", **change}
    response = client.post("/search", json=body)
    assert_error(response, 400, "INVALID_REQUEST")
    assert_plain_validation_message(response.json()["error"]["message"])


#: Words of pydantic's own error text and locations, which say nothing to a caller.
PYDANTIC_INTERNALS = ("function-after", "constrained-str", "_clean_text", "list[", "Input should", "Value error",
                      "Field required", "Extra inputs", "pydantic", "errors.pydantic.dev")


def assert_plain_validation_message(message: str) -> None:
    for word in PYDANTIC_INTERNALS:
        assert word not in message, message


def test_validation_errors_name_the_field_path_in_plain_words(client, indexed_base):
    cases = [
        ({"bases": "a\u0000b", "question": "x"}, "bases: text must not contain NUL characters"),
        ({"bases": ["kb", "a\u0000"], "question": "x"}, "bases[1]: text must not contain NUL characters"),
        ({"bases": 5, "question": "x"}, "bases: must be a string or a list"),
        ({"bases": [], "question": "x"}, "bases: must hold at least 1 item"),
        ({"bases": "kb", "question": "x", "top_k": 0}, "top_k: must be at least 1"),
        ({"bases": "kb", "question": "x", "top_k": "5"}, "top_k: must be a whole number"),
        ({"bases": "kb"}, "question: is required"),
        ({"bases": "kb", "question": ""}, "question: must not be empty"),
        ({"bases": "kb", "question": "x", "mode": "fuzzy"}, "mode: must be one of 'hybrid', 'dense' or 'keyword'"),
        ({"bases": "kb", "question": "x", "filters": {"kinds": ["x" * 11]}},
         "filters.kinds[0]: must have at most 10 characters"),
        ({"bases": "kb", "question": "x", "top-k": 3}, "top-k: is not a field of this request (misspelt?)"),
    ]
    for body, want in cases:
        response = client.post("/search", json=body)
        assert_error(response, 400, "INVALID_REQUEST")
        assert response.json()["error"]["message"] == want
    not_object = client.post("/search", content=b"[1, 2]", headers={"Content-Type": "application/json"})
    assert not_object.json()["error"]["message"] == "the body must be a JSON object"
    fact = client.post(f"/bases/{indexed_base}/facts", json={"text": "x", "supersedes": "a"})
    assert fact.json()["error"]["message"] == "supersedes: must be a whole number"


def test_bodies_that_are_not_json_objects_are_400(client):
    for content in (b"{", b"[1, 2]", b"\xff\xfe not utf-8", b"[" * 100_000 + b"]" * 100_000, b'"just a string"'):
        response = client.post("/search", content=content, headers={"Content-Type": "application/json"})
        assert_error(response, 400, "INVALID_REQUEST")
    surrogate = b'{"bases": "kb", "question": "\\ud800"}'
    assert_error(client.post("/search", content=surrogate, headers={"Content-Type": "application/json"}),
                 400, "INVALID_REQUEST")


def test_oversized_bodies_are_413_before_parsing(client, indexed_base):
    big = {"bases": indexed_base, "question": "router", "filters": {"path_prefix": "x" * 1_100_000}}
    assert_error(client.post("/search", json=big), 413, "REQUEST_TOO_LARGE")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the gate counts what arrives
        yield b'{"bases": "kb", "question": "'
        for _ in range(12):
            yield b"y" * 100_000
        yield b'"}'

    assert_error(client.post("/search", content=chunks(), headers={"Content-Type": "application/json"}),
                 413, "REQUEST_TOO_LARGE")


def test_unknown_base_is_404(client):
    assert_error(client.post("/search", json={"bases": "no-such-base", "question": "router"}), 404, "BASE_NOT_FOUND")
    assert_error(client.post("/search", json={"bases": ["no-such-base"], "question": "r", "mode": "keyword"}),
                 404, "BASE_NOT_FOUND")
    assert_error(client.delete("/bases/no-such-base"), 404, "BASE_NOT_FOUND")
    assert_error(client.get("/bases/no-such-base/status"), 404, "BASE_NOT_FOUND")


def test_unknown_route_is_404_and_wrong_method_400(client):
    assert_error(client.get("/nowhere"), 404, "NOT_FOUND")
    assert_error(client.get("/search"), 400, "INVALID_REQUEST")


def test_dense_search_without_its_embedding_model_is_503(client, metis, base_name):
    metis.create_base(base_name, embedding_url=f"http://127.0.0.1:{closed_port()}", model_timeout_s=2)
    response = client.post("/search", json={"bases": base_name, "question": "router", "mode": "dense"})
    assert_error(response, 503, "EMBEDDING_MODEL_UNAVAILABLE")
    assert response.headers["retry-after"] == "5"
    hybrid = client.post("/search", json={"bases": base_name, "question": "router"})
    assert hybrid.status_code == 200
    assert "KEYWORD_ONLY" in [w["code"] for w in hybrid.json()["warnings"]]


def test_sql_injection_strings_answer_below_500_and_change_nothing(client, metis, indexed_base):
    before = table_counts(metis)
    status_before = metis.base(indexed_base).status
    answers: list[tuple[str, int]] = []

    def record(what: str, response: httpx.Response) -> None:
        assert response.status_code < 500, (what, response.text)
        assert "error" in response.json() or "results" in response.json() or "bases" in response.json()
        answers.append((what, response.status_code))

    for s in INJECTIONS:
        q = quote(s, safe="")
        record("question", client.post("/search", json={"bases": indexed_base, "question": s, "mode": "keyword"}))
        record("question hybrid", client.post("/search", json={"bases": indexed_base, "question": s}))
        for field, value in (("path_prefix", s), ("sources", [s]), ("kinds", [s])):
            record(f"filters.{field}", client.post("/search", json={
                "bases": indexed_base, "question": "router", "mode": "keyword", "filters": {field: value}}))
        record("bases", client.post("/search", json={"bases": s, "question": "router", "mode": "keyword"}))
        record("bases list", client.post("/search", json={"bases": [indexed_base, s], "question": "router"}))
        record("GET base", client.get(f"/bases/{q}"))
        record("GET status", client.get(f"/bases/{q}/status"))
        record("DELETE base", client.delete(f"/bases/{q}"))
        record("POST base", client.post("/bases", json={"name": s}))
        record("index base", client.post(f"/bases/{q}/index", json={"paths": ["kb"]}))
        record("index path", client.post(f"/bases/{indexed_base}-x/index", json={"paths": [s]}))
        record("job id", client.get(f"/jobs/{q}"))
    assert len(answers) == 14 * len(INJECTIONS)
    # Filters and questions are values: they match nothing or something, and are never run.
    kinds_answers = {code for what, code in answers if what == "filters.kinds"}
    assert kinds_answers == {400}
    assert table_counts(metis) == before
    assert metis.base(indexed_base).status == status_before
    after = client.post("/search", json={"bases": indexed_base, "question": "PO-2231", "mode": "keyword"}).json()
    assert after["results"][0]["citation"]["document"] == "orders.txt"


# -- binding and settings ----------------------------------------------------------


def test_serve_refuses_to_bind_beyond_loopback_without_a_token():
    for host in ("0.0.0.0", "::", "192.0.2.10", "example.org", ""):
        with pytest.raises(ConfigError, match="METIS_API_TOKENS"):
            service.serve(host=host, port=1, tokens=[])  # refused before any database or socket is opened
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        service.check_bind(host, [])
    service.check_bind("0.0.0.0", [TOKEN])


def test_short_tokens_and_missing_source_roots_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="at least 16"):
        service.parse_tokens("short,also-short")
    assert service.parse_tokens(f" {TOKEN} ,, {OTHER_TOKEN} ") == (TOKEN, OTHER_TOKEN)
    with pytest.raises(ConfigError, match="not a folder"):
        service.parse_source_roots(f"{tmp_path}:{tmp_path / 'missing'}")
    assert service.parse_source_roots(f"{tmp_path}:") == (tmp_path.resolve(),)


def test_without_tokens_on_loopback_no_token_is_asked(metis, indexed_base):
    app = service.create_app(metis, tokens=[], source_roots=[])
    with service.running(app) as url:
        response = httpx.post(f"{url}/search", json={"bases": indexed_base, "question": "router", "mode": "keyword"})
    assert response.status_code == 200


def test_docs_list_every_route_setting_and_error_code(metis):
    text = (Path(__file__).resolve().parents[1] / "docs" / "http.md").read_text(encoding="utf-8")
    app = service.create_app(metis, tokens=[TOKEN], source_roots=[])
    routes = [(m.upper(), path) for path, item in app.openapi()["paths"].items() for m in item]
    assert len(routes) == 15
    for method, path in routes:
        assert f"`{method} {path}" in text, (method, path)
    for name, _, _ in service.SETTINGS:
        assert f"`{name}`" in text, name
    for code in ("INVALID_REQUEST", "UNAUTHORIZED", "BASE_NOT_FOUND", "NOT_FOUND", "REQUEST_TOO_LARGE",
                 "EMBEDDING_MODEL_UNAVAILABLE"):
        assert f"`{code}`" in text, code


def test_metis_serve_command_refuses_a_public_bind_without_a_token():
    env = {k: v for k, v in os.environ.items() if k != "METIS_API_TOKENS"}
    done = subprocess.run([str(METIS), "serve", "--host", "0.0.0.0", "--port", "1"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "error [CONFIG_INVALID]" in done.stderr and "METIS_API_TOKENS" in done.stderr


def test_metis_serve_command_serves_healthz_and_search(dsn, indexed_base):
    port = closed_port()
    env = {**os.environ, "METIS_API_TOKENS": TOKEN}
    proc = subprocess.Popen([str(METIS), "serve", "--port", str(port), "--dsn", dsn], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "metis serve did not answer within 60 s"
                time.sleep(0.2)
        assert health.json()["status"] == "ok"
        answer = httpx.post(f"http://127.0.0.1:{port}/search", headers={"Authorization": f"Bearer {TOKEN}"},
                            json={"bases": indexed_base, "question": "PO-2231", "mode": "keyword"}, timeout=30)
        assert answer.status_code == 200 and answer.json()["results"][0]["citation"]["document"] == "orders.txt"
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=30)
    # The INFO line per search (docs/http.md) is printed, without the question.
    assert f"search bases={indexed_base} mode=keyword top_k=10 results=" in output, output
    assert '"POST /search HTTP/1.1" 200' in output and "PO-2231" not in output


def test_the_service_log_shows_other_libraries_warnings_on_one_line_in_its_own_format():
    # metis serve's logging, then its MCP server (the SDK's MCPServer calls logging.basicConfig with a
    # rich handler): psycopg's pool warnings (after the database restarted) came out wrapped over
    # three lines of 80 columns in another format (found by the tester, 2026-12-05).
    script = """
import logging, logging.config
from metis_pg.service.server import service_log_config
from metis_pg.mcp_server import build_server
logging.config.dictConfig(service_log_config())
build_server(None)
logging.getLogger("psycopg.pool").warning("discarding closed connection: <psycopg.Connection [BAD] at 0x7f22a95bea90>")
logging.getLogger("somelib").info("chatter that is not the service's")
logging.getLogger("metis_pg.service").info("search bases=x mode=keyword top_k=5 results=5 12.0 ms")
"""
    env = {**os.environ, "COLUMNS": "80"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "WARNING:  discarding closed connection: <psycopg.Connection [BAD] at 0x7f22a95bea90>",
        "INFO:     search bases=x mode=keyword top_k=5 results=5 12.0 ms",
    ], done.stderr


# -- bounded load ------------------------------------------------------------------


def run_load(url: str, base: str, mode: str, clients: int, searches: int) -> tuple[list[float], list[str]]:
    """`clients` threads each send `searches` searches; return latencies (ms) and errors."""
    questions = ["PO-2231", "router reset", "modem error", "vacation days", "two signatures"]
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def one_client(i: int) -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as c:
            for j in range(searches):
                body = {"bases": base, "question": questions[(i + j) % len(questions)], "mode": mode, "top_k": 5}
                t0 = time.perf_counter()
                try:
                    r = c.post("/search", json=body)
                    ok = r.status_code == 200 and len(r.json()["results"]) > 0
                    error = None if ok else f"{r.status_code} {r.text[:200]}"
                except httpx.HTTPError as exc:
                    error = repr(exc)
                with lock:
                    latencies.append((time.perf_counter() - t0) * 1000)
                    if error:
                        errors.append(error)

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one_client, range(clients)))
    return latencies, errors


def test_bounded_load_keyword_and_hybrid_has_no_errors(url, indexed_base):
    keyword, keyword_errors = run_load(url, indexed_base, "keyword", clients=5, searches=10)
    hybrid, hybrid_errors = run_load(url, indexed_base, "hybrid", clients=5, searches=4)
    assert keyword_errors == [] and hybrid_errors == []
    assert len(keyword) == 50 and len(hybrid) == 20
    assert statistics.median(keyword) > 0 and statistics.median(hybrid) > 0



# -- the package's layout ------------------------------------------------------------


def test_metis_pg_service_keeps_its_public_names_and_each_concern_has_its_module():
    # cli.py, the tests and benchmarks import these from metis_pg.service; the package split must not break them.
    for name in service.__all__:
        assert getattr(service, name) is not None, name
    from metis_pg.service import app, errors, gate, jobs, schemas, server, settings, sources

    assert service.create_app is app.create_app and service.serve is server.serve
    assert service.error_response is errors.error_response and service.Jobs is jobs.Jobs
    assert service.resolve_source_path is sources.resolve_source_path and service.SETTINGS is settings.SETTINGS
    assert hasattr(gate, "Gate") and hasattr(schemas, "SearchIn")


# -- overload and slow clients ---------------------------------------------------------


def raw_request(url: str, data: bytes, *, dribble: bytes = b"", every_s: float = 0.3,
                give_up_s: float = 20) -> tuple[bytes, float]:
    """Send `data` on a raw connection, then `dribble` one byte every `every_s`; return what came back and when.

    Reads until the server closes the connection or `give_up_s` pass (then the answer is what came so far).
    """
    host, port = url.removeprefix("http://").split(":")
    started = time.monotonic()
    received = b""
    with socket.create_connection((host, int(port)), timeout=give_up_s) as sock:
        sock.sendall(data)
        sock.settimeout(every_s if dribble else give_up_s)
        pending = list(dribble)
        while time.monotonic() - started < give_up_s:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                if pending:
                    try:
                        sock.sendall(bytes([pending.pop(0)]))
                    except OSError:
                        break
                continue
            except OSError:
                break
            if not chunk:
                break
            received += chunk
    return received, time.monotonic() - started


@pytest.fixture()
def held_embeddings() -> Iterator[tuple[FakeService, threading.Event, list[int]]]:
    """An embedding service that answers only once released; it records the most requests it held at once."""
    release = threading.Event()
    lock = threading.Lock()
    state = {"now": 0}
    peak = [0]

    def respond(path: str, body: Any) -> tuple[int, Any]:
        with lock:
            state["now"] += 1
            peak[0] = max(peak[0], state["now"])
        release.wait(20)
        with lock:
            state["now"] -= 1
        return openai_embeddings(body, 384)

    fake = FakeService(respond)
    try:
        yield fake, release, peak
    finally:
        release.set()
        fake.close()


def test_searches_beyond_the_in_flight_bound_are_503_with_retry_after_at_once(metis, base_name, held_embeddings):
    fake, release, peak = held_embeddings
    metis.create_base(base_name, embedding_model="held", embedding_url=fake.url, embedding_dim=384)
    app = service.create_app(metis, tokens=[TOKEN], source_roots=[], max_inflight_searches=2)
    with service.running(app) as url, ThreadPoolExecutor(8) as pool:
        def search(i: int) -> httpx.Response:
            path = "/compare" if i % 4 == 3 else "/search"
            body = {"bases": base_name, "question": f"question {i}", **({"mode": "dense"} if path == "/search" else {})}
            return httpx.post(f"{url}{path}", json=body, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)

        futures = [pool.submit(search, i) for i in range(8)]
        refused = []
        try:
            # Two searches are held by the model; the other six must be answered while those still wait.
            for future in as_completed(futures, timeout=15):
                refused.append(future.result())
                if len(refused) == 6:
                    break
        finally:
            release.set()
        answers = [f.result(timeout=30) for f in futures]
    for response in refused:
        assert_error(response, 503, "OVERLOADED")
        assert response.headers["retry-after"] == "1"
    assert sorted(r.status_code for r in answers) == [200, 200] + [503] * 6
    assert peak[0] <= 2


def test_a_client_that_never_finishes_its_body_gets_408_and_is_dropped(metis):
    app = service.create_app(metis, tokens=[TOKEN], source_roots=[], request_read_timeout_s=1)
    with service.running(app) as url:
        head = (f"POST /search HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{").encode()
        answer, seconds = raw_request(url, head)
        dribbled, dribble_seconds = raw_request(url, head, dribble=b'"bases": "kb", "question": "x"' * 4)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b'"REQUEST_TIMEOUT"' in answer and seconds < 10
    # A byte now and then does not extend the deadline: it counts from the first byte of the body.
    assert dribbled.startswith(b"HTTP/1.1 408 "), dribbled
    assert dribble_seconds < 10


def test_a_client_that_sends_its_headers_slowly_or_never_is_dropped(metis):
    app = service.create_app(metis, tokens=[TOKEN], source_roots=[], request_read_timeout_s=1)
    with service.running(app) as url:
        silent, silent_seconds = raw_request(url, b"")
        partial, partial_seconds = raw_request(url, b"POST /search HTTP/1.1\r\nHost: x\r\n")
        slow, slow_seconds = raw_request(url, b"GET /healthz HTTP/1.1\r\n", dribble=b"X-Slow: " + b"a" * 60)
        # The service still answers everyone else.
        assert httpx.get(f"{url}/healthz").status_code == 200
    for answer, seconds in ((silent, silent_seconds), (partial, partial_seconds), (slow, slow_seconds)):
        assert seconds < 10, (answer, seconds)
        assert answer == b"" or answer.startswith(b"HTTP/1.1 408 "), answer
    assert b'"REQUEST_TIMEOUT"' in partial and b'"REQUEST_TIMEOUT"' in slow


def test_connections_beyond_max_connections_are_answered_503_and_closed(metis):
    app = service.create_app(metis, tokens=[TOKEN], source_roots=[], max_connections=4)
    with service.running(app) as url:
        host, port = url.removeprefix("http://").split(":")
        held = [socket.create_connection((host, int(port)), timeout=10) for _ in range(4)]
        try:
            time.sleep(0.3)
            answer, seconds = raw_request(url, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        finally:
            for sock in held:
                sock.close()
        time.sleep(0.3)
        assert httpx.get(f"{url}/healthz").status_code == 200
    assert answer.startswith(b"HTTP/1.1 503 "), answer
    assert b"retry-after: 1" in answer.lower() and b'"OVERLOADED"' in answer and seconds < 10


# -- model URLs given over HTTP (SSRF) ---------------------------------------------------


def test_model_urls_given_over_http_must_be_on_the_operator_allow_list(metis, base_name):
    # A service only the server can reach, whose answers must never come back to the caller.
    inside = FakeService(lambda path, body: (500, {"admin": "db password hunter2"}))
    try:
        app = service.create_app(metis, tokens=[TOKEN], source_roots=[])  # default: no model URL over HTTP
        with service.running(app) as url, httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"},
                                                       timeout=30) as c:
            for body in ({"embedding_url": inside.url}, {"reranker_model": "r", "reranker_url": inside.url}):
                refused = c.post("/bases", json={"name": base_name, **body})
                assert_error(refused, 400, "INVALID_REQUEST")
                assert "METIS_MODEL_URL_ALLOW_HOSTS" in refused.json()["error"]["message"]
                assert_error(c.get(f"/bases/{base_name}"), 404, "BASE_NOT_FOUND")
        allowed = f"127.0.0.1:{inside.port}"
        app = service.create_app(metis, tokens=[TOKEN], source_roots=[], model_url_allow_hosts=allowed)
        with service.running(app) as url, httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"},
                                                       timeout=30) as c:
            for other in (f"http://127.0.0.1:{inside.port + 1}", f"http://localhost:{inside.port}",
                          f"http://127.0.0.1:{inside.port}@169.254.169.254/latest", "http://169.254.169.254/",
                          "file:///etc/passwd", f"gopher://127.0.0.1:{inside.port}/", "http://[::1]:80/"):
                assert_error(c.post("/bases", json={"name": base_name, "embedding_url": other}), 400, "INVALID_REQUEST")
            assert c.post("/bases", json={"name": base_name, "embedding_url": inside.url}).status_code == 201
        assert inside.requests == []  # nothing refused was ever called
    finally:
        inside.close()


def test_the_model_url_allow_list_parses_hosts_and_ports_and_refuses_urls():
    from metis_pg.service.model_urls import check_model_url, parse_allow_hosts

    allowed = parse_allow_hosts(" eos:8081, TEI ,[::1]:8081, 10.0.0.7 ,")
    assert allowed == {("eos", 8081), ("tei", None), ("::1", 8081), ("10.0.0.7", None)}
    for url in ("http://eos:8081/v1", "https://tei/", "http://tei:9999", "http://[::1]:8081", "http://10.0.0.7:1"):
        check_model_url("embedding_url", url, allowed)
    for url in ("http://eos:8082", "http://eos", "http://[::1]:8082", "http://10.0.0.8", "ftp://tei/", "http://:80"):
        with pytest.raises(metis_pg.InvalidInput):
            check_model_url("embedding_url", url, allowed)
    for bad in ("http://eos:8081", "eos:port", "eos:0", "a/b", "user@eos", "[::1", "[::1]x"):
        with pytest.raises(ConfigError, match="METIS_MODEL_URL_ALLOW_HOSTS"):
            parse_allow_hosts(bad)
    assert parse_allow_hosts("") == frozenset() and parse_allow_hosts(None) == frozenset()


# -- indexing jobs: what they show, when they check, how they fail ---------------------


def test_job_reports_show_paths_relative_to_their_source_root(client, base_name, roots):
    folder = f"rel-{base_name}"
    write_corpus(roots / folder, {"a.txt": "Alpha words.", "sub/b.md": "# B\n\nBeta words.\n"})
    (roots / folder / "leaving.txt").symlink_to(roots / "kb" / "router.txt")
    (roots / folder / "dangling.txt").symlink_to(roots / folder / "nowhere.txt")
    started = client.post(f"/bases/{base_name}/index", json={"paths": [str(roots / folder)]})
    assert started.status_code == 202, started.text
    assert started.json()["paths"] == [folder]
    job = wait_for_job(client, started.json()["id"])
    assert job["state"] == "done", job
    assert job["paths"] == [folder]
    assert job["report"]["new"] == 2
    warnings = job["report"]["warnings"]
    assert f"{folder}/leaving.txt: skipped: symbolic link leaving {folder}: not followed" in warnings, warnings
    assert f"{folder}/dangling.txt: skipped: symbolic link loop or dangling link: not followed" in warnings
    assert str(roots) not in json.dumps(job) and str(roots.parent) not in json.dumps(job)


def test_a_folder_swapped_for_a_link_after_the_job_was_sent_is_not_indexed(client, metis, base_name, roots,
                                                                           held_embeddings):
    fake, release, _ = held_embeddings
    blocker = f"{base_name}-blocker"
    metis.create_base(blocker, embedding_model="held", embedding_url=fake.url, embedding_dim=384)
    write_corpus(roots / blocker, {"wait.txt": "This document waits for its embedding."})
    swapped, vanished = f"swap-{base_name}", f"gone-{base_name}"
    write_corpus(roots / swapped, {"fine.txt": "An innocent document."})
    write_corpus(roots / vanished, {"fine.txt": "Another innocent document."})
    try:
        # Jobs run one at a time: the blocker's embedding is held, so the next jobs wait in the queue.
        first = client.post(f"/bases/{blocker}/index", json={"paths": [blocker]}).json()
        deadline = time.monotonic() + 30
        while not fake.requests:
            assert time.monotonic() < deadline, "the blocker job never asked for its embeddings"
            time.sleep(0.05)
        queued = [client.post(f"/bases/{base_name}/index", json={"paths": [p]}) for p in (swapped, vanished)]
        assert [q.status_code for q in queued] == [202, 202], [q.text for q in queued]
        assert [q.json()["state"] for q in queued] == ["queued", "queued"]
        # Meanwhile the folder becomes a link to a folder outside the roots, and the other one goes away.
        (roots / swapped).rename(roots / f"{swapped}-old")
        (roots / swapped).symlink_to(roots.parent / "outside", target_is_directory=True)
        shutil.rmtree(roots / vanished)
    finally:
        release.set()
    assert wait_for_job(client, first["id"])["state"] == "done"
    swap_job, gone_job = (wait_for_job(client, q.json()["id"]) for q in queued)
    assert swap_job["state"] == gone_job["state"] == "failed", (swap_job, gone_job)
    assert swap_job["error"]["code"] == "INVALID_REQUEST"
    assert "outside the source roots" in swap_job["error"]["message"]
    assert gone_job["error"] == {"code": "INVALID_REQUEST",
                                 "message": f"no such file or folder under the source roots: {vanished!r}"}
    found = client.post("/search", json={"bases": base_name, "question": "secret launch code", "mode": "keyword"})
    assert found.status_code == 200 and found.json()["results"] == []
    assert metis.base(base_name).documents == 0
    metis.drop_base(blocker)


def test_a_job_that_hits_a_bug_says_internal_error_and_logs_the_traceback(metis, base_name, roots, caplog):
    class Buggy(metis_pg.Metis):
        def index(self, base: str, *paths: Any, **options: Any) -> Any:
            raise RuntimeError(f"a bug reading {paths[0]}")

    jobs = service.Jobs(Buggy(metis.dsn, pool=metis.pool), [roots])
    try:
        with caplog.at_level("ERROR", logger="metis_pg.service.jobs"):
            job = jobs.submit(base_name, ["kb"], None)
            deadline = time.monotonic() + 30
            while job.state not in ("done", "failed"):
                assert time.monotonic() < deadline
                time.sleep(0.05)
    finally:
        jobs.close()
    assert job.state == "failed" and job.paths == ["kb"]
    assert job.error == {"code": "METIS_ERROR", "message": "internal error: see the server log"}
    logged = [r for r in caplog.records if r.exc_info and r.exc_info[0] is RuntimeError]
    assert logged and job.id in logged[0].getMessage()


def test_a_job_on_a_base_another_indexer_holds_fails_with_base_busy(client, metis, base_name, roots,
                                                                    held_embeddings):
    fake, release, _ = held_embeddings
    metis.create_base(base_name, embedding_model="held", embedding_url=fake.url, embedding_dim=384)
    folder = f"busy-{base_name}"
    write_corpus(roots / folder, {"a.txt": "A document indexed twice at once."})
    with ThreadPoolExecutor(1) as pool:
        other = pool.submit(metis.index, base_name, roots / folder)  # another indexer, held by its model
        try:
            deadline = time.monotonic() + 30
            while not fake.requests:
                assert time.monotonic() < deadline, "the other indexer never asked for its embeddings"
                time.sleep(0.05)
            started = client.post(f"/bases/{base_name}/index", json={"paths": [folder]})
            job = wait_for_job(client, started.json()["id"], timeout_s=60)
        finally:
            release.set()
        other.result(timeout=60)
    assert job["state"] == "failed", job
    assert job["error"]["code"] == "BASE_BUSY" and base_name in job["error"]["message"]


def test_a_database_that_does_not_answer_is_503_with_retry_after(metis):
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(f"postgresql://metis@127.0.0.1:{closed_port()}/metis", min_size=1, open=False)
    pool.open(wait=False)
    try:
        app = service.create_app(metis_pg.Metis(metis.dsn, pool=pool), tokens=[], source_roots=[])
        with service.running(app) as url:
            response = httpx.get(f"{url}/healthz", timeout=30)
    finally:
        pool.close(timeout=1)
    assert_error(response, 503, "DATABASE_UNAVAILABLE")
    assert response.headers["retry-after"] == "5"


def test_service_limits_are_read_from_the_environment_and_must_be_positive(metis, monkeypatch):
    monkeypatch.setenv("METIS_MAX_INFLIGHT_SEARCHES", "3")
    monkeypatch.setenv("METIS_REQUEST_READ_TIMEOUT_S", "2.5")
    monkeypatch.setenv("METIS_MODEL_URL_ALLOW_HOSTS", "eos:8081")
    settings = metis_pg.Settings.from_env()
    assert (settings.max_inflight_searches, settings.request_read_timeout_s) == (3, 2.5)
    assert settings.model_url_allow_hosts == "eos:8081"
    app = service.create_app(metis, tokens=[], source_roots=[])
    assert app.state.limits.max_inflight_searches == 3 and app.state.limits.request_read_timeout_s == 2.5
    assert service.create_app(metis, tokens=[], source_roots=[], max_inflight_searches=7).state.limits \
        .max_inflight_searches == 7
    for name, value in (("METIS_MAX_INFLIGHT_SEARCHES", "0"), ("METIS_MAX_CONNECTIONS", "many"),
                        ("METIS_REQUEST_READ_TIMEOUT_S", "-1"), ("METIS_KEEP_ALIVE_TIMEOUT_S", "nan")):
        with monkeypatch.context() as env:
            env.setenv(name, value)
            with pytest.raises(ConfigError, match=name):
                metis_pg.Settings.from_env()
    monkeypatch.delenv("METIS_MAX_INFLIGHT_SEARCHES")
    assert metis_pg.Settings.from_env().max_inflight_searches == 8 * (os.cpu_count() or 1)


def test_accepted_connections_send_small_writes_at_once(metis):
    # A listening socket made with socket.socket() has proto 0: asyncio then leaves Nagle on for the
    # connections it accepts, and every answer (headers, then body) waited ~40 ms for a delayed ACK.
    import uvicorn

    from metis_pg.service.server import uvicorn_config

    app = service.create_app(metis, tokens=[], source_roots=[])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn_config(app))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 15
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.02)
        with httpx.Client(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}") as c:
            assert c.get("/healthz").status_code == 200
            (connection,) = server.server_state.connections
            accepted = connection.transport.get_extra_info("socket")
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()
