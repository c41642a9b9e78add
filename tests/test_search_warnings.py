"""Each warning says what the search did and why (SPEC F14; issue 25, item 3), per mode and per cause.

Chunks without a vector have three causes: an indexer embeds them now, the last indexing stopped
before embedding them (Ctrl-C, a killed process), or the embedding model did not answer when
they were indexed. A hybrid search finds them by keywords; a dense one cannot find them at all;
a keyword one needs no vector. Asked through ``metis search --json`` against the test database.
"""

from __future__ import annotations

import pytest

from cli_runner import run_cli
from corpus import write_corpus
from metis_pg import storage
from model_servers import FAILURES, FakeService, embedding_service

FIRST = {"router.txt": "Reset the router using the red button for ten seconds.",
         "gateway.txt": "How to restore factory defaults on your network gateway."}
LATER = {"modem.txt": "Error E4021 means the modem failed to authenticate.",
         "orders.txt": "Purchase order PO-2231 was approved on Monday."}

SAYS = {
    "embedding": "being embedded now",
    "interrupted": "the last indexing stopped before embedding them: `metis index --base {base}` embeds them",
    "model down": "indexed while the embedding model did not answer",
}
DOES = {
    "hybrid": "those are found by keywords only",
    "dense": "a dense search cannot find those until they are embedded",
}


@pytest.fixture()
def two_without_vector(metis, base_name, tmp_path, monkeypatch):
    """A base of 4 chunks, 2 of them indexed while the model failed (status waiting); the model answers again."""
    monkeypatch.setenv("METIS_MODEL_RETRY_WAIT_S", "0.01")
    monkeypatch.setenv("METIS_MODEL_BREAKER_COOLDOWN_S", "0")
    service = FakeService(embedding_service(384))
    try:
        metis.create_base(base_name, embedding_model="test-embed", embedding_url=service.url, embedding_dim=384,
                          model_timeout_s=5.0)
        folder = write_corpus(tmp_path / "kb", FIRST)
        assert metis.index(base_name, folder).status == "ready"
        service.respond = FAILURES["http500"]
        write_corpus(folder, LATER)
        assert metis.index(base_name, folder).status == "waiting"
        service.respond = embedding_service(384)
        yield base_name
    finally:
        service.close()


def warnings_of(dsn: str, base: str, mode: str) -> dict[str, str]:
    result = run_cli("search", base, "modem authenticate", "--mode", mode, "--json", "--dsn", dsn)
    assert result.code == 0, result.stderr
    return {w["code"]: w["message"] for w in result.json()["warnings"]}


@pytest.mark.parametrize("mode", ["hybrid", "dense", "keyword"])
@pytest.mark.parametrize("cause", ["embedding", "interrupted", "model down"])
def test_no_vector_yet_says_the_cause_and_what_the_mode_did(dsn, metis, two_without_vector, cause, mode):
    base = two_without_vector
    with metis.pool.connection() as conn:
        base_id = storage.get_base(conn, base).base_id
        if cause == "interrupted":  # what a killed indexer leaves: the row says indexing, no indexer holds it
            conn.execute("UPDATE bases SET status = 'indexing' WHERE base_id = %s", (base_id,))
    if cause == "embedding":
        with storage.indexer_session(metis.pool, base_id):  # a live indexer holds the base
            said = warnings_of(dsn, base, mode)
    else:
        said = warnings_of(dsn, base, mode)
    if mode == "keyword":
        assert "NO_VECTOR_YET" not in said, said
        return
    text = said["NO_VECTOR_YET"]
    assert text == f"2 chunks of {base!r} have no vector yet ({SAYS[cause].format(base=base)}): {DOES[mode]}"
    assert "KEYWORD_ONLY" not in said  # the model answered: the search used it
