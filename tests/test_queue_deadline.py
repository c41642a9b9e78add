"""The queue deadline of the HTTP service (issue 26, item 9).

Searches admitted under ``max_inflight_searches`` used to wait without bound for
their turn (p99 6.9 s at 128 clients). Now at most ``search_workers`` are
computed at once and one that waits longer than ``search_queue_s`` for its turn
is answered 503 ``OVERLOADED`` with ``Retry-After`` then, instead of late.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from metis_pg import service

from model_servers import FakeService, openai_embeddings

TOKEN = "test-token-" + "6" * 24


def test_a_search_not_started_within_the_queue_deadline_is_503_with_retry_after(metis, base_name):
    release = threading.Event()
    calls = []

    def respond(path: str, body: Any) -> tuple[int, Any]:
        calls.append(time.monotonic())
        release.wait(20)
        return openai_embeddings(body, 384)

    fake = FakeService(respond)
    try:
        metis.create_base(base_name, embedding_model="held", embedding_url=fake.url, embedding_dim=384)
        app = service.create_app(metis, tokens=[TOKEN], source_roots=[], max_inflight_searches=8,
                                 search_workers=1, search_queue_s=0.5)
        with service.running(app) as url, ThreadPoolExecutor(4) as pool:
            def search(i: int) -> tuple[httpx.Response, float]:
                started = time.monotonic()
                answer = httpx.post(f"{url}/search", json={"bases": base_name, "question": f"q{i}", "mode": "dense"},
                                    headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
                return answer, time.monotonic() - started

            first = pool.submit(search, 0)
            deadline = time.monotonic() + 10
            while not calls and time.monotonic() < deadline:  # the first search holds the one worker
                time.sleep(0.01)
            queued = [pool.submit(search, i) for i in (1, 2, 3)]
            late = [f.result(timeout=10) for f in queued]  # answered while the first still waits on the model
            release.set()
            answer, _ = first.result(timeout=30)
            again = httpx.post(f"{url}/search", json={"bases": base_name, "question": "later", "mode": "dense"},
                               headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    finally:
        release.set()
        fake.close()
    assert answer.status_code == 200
    assert len(calls) == 2  # the three late ones never reached the model; the one after did
    for response, seconds in late:
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "OVERLOADED"
        assert "METIS_SEARCH_QUEUE_S" in response.json()["error"]["message"]
        assert response.headers["retry-after"] == "1"
        assert 0.4 < seconds < 5, seconds
    assert again.status_code == 200  # the turns were all given back
