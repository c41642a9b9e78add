"""The access log never shows a credential sent in a URL (issue 26, item 10)."""

from __future__ import annotations

import httpx

from metis_pg import service
from metis_pg.service.logs import redact_query
from metis_pg.service.server import service_log_config

TOKEN = "test-token-" + "4" * 24


def test_a_token_sent_in_the_url_is_redacted_in_the_access_log(metis, capfd):
    app = service.create_app(metis, tokens=[TOKEN], source_roots=[])
    with service.running(app, log_config=service_log_config()) as url:
        httpx.get(f"{url}/bases?access_token=s3cret-in-url&limit=5", headers={"Authorization": f"Bearer {TOKEN}"})
        httpx.get(f"{url}/healthz?api_key=k3y-in-url")
        httpx.get(f"{url}/healthz?{TOKEN}")
    out, err = capfd.readouterr()
    log = out + err
    assert "GET /bases?access_token=[REDACTED]&limit=5 HTTP/1.1" in log, log
    assert "GET /healthz?api_key=[REDACTED] HTTP/1.1" in log, log
    assert "GET /healthz?[REDACTED] HTTP/1.1" in log, log
    for secret in ("s3cret-in-url", "k3y-in-url", TOKEN):
        assert secret not in log


def test_redaction_keeps_the_path_and_the_other_parameters():
    assert redact_query("/search") == "/search"
    assert redact_query("/x?token=a&q=b") == "/x?token=[REDACTED]&q=b"
    assert redact_query("/x?X-Api-Key=a&Authorization=Bearer%20z&password=p&sig=1&page=2") == (
        "/x?X-Api-Key=[REDACTED]&Authorization=[REDACTED]&password=[REDACTED]&sig=[REDACTED]&page=2")
