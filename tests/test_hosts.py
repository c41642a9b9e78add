"""DNS rebinding and cross-site requests on the token-less service (issue 26, item 5).

Without tokens the service binds loopback, but a browser page of any site can
reach it: by DNS rebinding (``Host: evil.example:18080``) or by posting from its
own origin. Every route family must refuse a foreign Host (421), and anything
that changes state must refuse a foreign Origin (403).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

import metis_pg
from metis_pg import service
from metis_pg.service.hosts import host_allowed, origin_allowed, parse_allowed_hosts

EVIL = "evil.example:18080"

#: One request per route family: (method, path, JSON body or None). {base} is a base that exists.
ROUTES = [
    ("GET", "/healthz", None),
    ("GET", "/bases", None),
    ("GET", "/bases/{base}", None),
    ("GET", "/bases/{base}/status", None),
    ("POST", "/bases", {"name": "rebound-{uid}"}),
    ("DELETE", "/bases/{base}", None),
    ("POST", "/search", {"bases": "{base}", "question": "router", "mode": "keyword"}),
    ("POST", "/compare", {"bases": "{base}", "question": "router"}),
    ("POST", "/bases/{base}/index", {"paths": ["kb"]}),
    ("GET", "/jobs/nope", None),
    ("POST", "/bases/{base}/notes", {"title": "t", "text": "a note"}),
    ("GET", "/bases/{base}/notes", None),
    ("GET", "/bases/{base}/facts", None),
    ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    ("GET", "/", None),
    ("GET", "/docs", None),
    ("GET", "/openapi.json", None),
]


@pytest.fixture()
def open_service(metis: metis_pg.Metis, base_name: str) -> Iterator[str]:
    """The service without tokens (loopback), allowing one extra host name, over a base that exists."""
    metis.create_base(base_name)
    metis.add_note(base_name, "router", "Reset the router using the red button.")
    app = service.create_app(metis, tokens=[], source_roots=[], allowed_hosts="metis.lan")
    with service.running(app) as url:
        yield url


def _send(url: str, method: str, path: str, body, base: str, headers: dict[str, str]) -> httpx.Response:
    fill = {"base": base, "uid": uuid.uuid4().hex[:8]}
    path = path.format(**fill)
    if isinstance(body, dict):
        body = {k: (v.format(**fill) if isinstance(v, str) else v) for k, v in body.items()}
    headers = {"Accept": "application/json, text/event-stream", **headers}
    return httpx.request(method, f"{url}{path}", json=body, headers=headers, timeout=30)


@pytest.mark.parametrize("method,path,body", ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
def test_a_foreign_host_is_refused_on_every_route_without_tokens(open_service, metis, base_name, method, path, body):
    response = _send(open_service, method, path, body, base_name, {"Host": EVIL, "Origin": f"http://{EVIL}"})
    assert response.status_code == 421, response.text
    assert response.json()["error"]["code"] == "HOST_NOT_ALLOWED"
    assert base_name in {b.name for b in metis.list_bases()}  # the DELETE of the issue dropped it


@pytest.mark.parametrize("method,path,body", [r for r in ROUTES if r[0] != "GET"],
                         ids=[f"{m} {p}" for m, p, _ in ROUTES if m != "GET"])
def test_a_state_changing_request_from_a_foreign_origin_is_refused(open_service, metis, base_name, method, path, body):
    for origin in (f"http://{EVIL}", "null", "http://127.0.0.1.evil.example"):
        response = _send(open_service, method, path, body, base_name, {"Origin": origin})
        assert response.status_code == 403, (origin, response.text)
        assert response.json()["error"]["code"] == "ORIGIN_NOT_ALLOWED"
    assert base_name in {b.name for b in metis.list_bases()}
    assert [n.title for n in metis.notes(base_name)] == ["router"]


def test_loopback_and_configured_hosts_and_origins_are_served(open_service, base_name):
    for host in (None, "localhost:8080", "127.0.0.1", "[::1]:8080", "metis.lan", "METIS.LAN:9000"):
        headers = {"Host": host} if host else {}
        assert _send(open_service, "GET", "/bases", None, base_name, headers).status_code == 200, host
    for origin in ("http://localhost:8080", "http://127.0.0.1:18080", "https://metis.lan"):
        search = _send(open_service, "POST", "/search", {"bases": "{base}", "question": "router", "mode": "keyword"},
                       base_name, {"Origin": origin})
        assert search.status_code == 200, (origin, search.text)
    note = _send(open_service, "POST", "/bases/{base}/notes", {"title": "t2", "text": "x"}, base_name, {})
    assert note.status_code == 201  # no Origin: a program, not a browser page
    dropped = _send(open_service, "DELETE", "/bases/{base}", None, base_name, {"Origin": "http://localhost:1"})
    assert dropped.status_code == 200


def test_with_tokens_the_token_is_the_check(metis, base_name):
    metis.create_base(base_name)
    token = "test-token-" + "5" * 24
    app = service.create_app(metis, tokens=[token], source_roots=[])
    with service.running(app) as url:
        foreign = httpx.get(f"{url}/bases/{base_name}", headers={"Host": EVIL})
        ok = httpx.get(f"{url}/bases/{base_name}", headers={"Host": "metis.example", "Authorization": f"Bearer {token}"})
    assert foreign.status_code == 401
    assert ok.status_code == 200


def test_host_and_origin_parsing():
    allowed = parse_allowed_hosts(" Metis.LAN , docs.lan:8443,")
    assert allowed == {"metis.lan", "docs.lan:8443"}
    for good in ("localhost", "LOCALHOST:1", "127.0.0.1:8080", "127.5.6.7", "[::1]", "[::1]:80", "metis.lan:1",
                 "docs.lan:8443", "localhost."):
        assert host_allowed(good, allowed), good
    for bad in (None, "", "evil.example", "docs.lan", "docs.lan:80", "127.0.0.1.evil.example", "[::2]",
                "0.0.0.0", "localhost.evil.example", "10.0.0.1"):
        assert not host_allowed(bad, allowed), bad
    assert origin_allowed(None, allowed)
    for bad in ("null", "file://", "http://evil.example", "http://127.0.0.1@evil.example", "ftp://localhost"):
        assert not origin_allowed(bad, allowed), bad
    assert origin_allowed("http://localhost:3000", allowed) and origin_allowed("https://metis.lan", allowed)
