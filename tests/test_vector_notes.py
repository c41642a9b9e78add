"""Why a chunk has no vector is stored (issue 26, item 1; migration 0018 ``vector_notes``).

A real HTTP embedding service (tests/model_servers.py) refuses one text. The refusal is
stored per chunk: status counts it by reason everywhere (Python, ``metis status``, HTTP,
MCP), the next ``metis index`` does not send that text again, and another
``METIS_EMBED_MAX_CHARS`` does. Chunks left by a model that did not answer are noted as
such and embedded by the next run; a vector made from a cut text is noted ``cut``.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

import metis_pg
from metis_pg.config import Settings
from metis_pg.mcp_server import _status
from metis_pg.service.app import create_app

from cli_runner import run_cli
from corpus import write_corpus
from model_servers import FakeService, openai_embeddings

DIM = 64
POISON = "POISONED"


class Model:
    """An embedding service that refuses (413, as `metis eos serve`'s TEXT_TOO_LONG) any request holding
    POISON, and answers 500 while `down`; it keeps the texts it was sent."""

    def __init__(self) -> None:
        self.down = False
        self.sent: list[str] = []
        self.service = FakeService(self.respond)

    def respond(self, path: str, body: Any):
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        self.sent.extend(texts)
        if self.down:
            return 500, {"error": "down"}
        if any(POISON in t for t in texts):
            return 413, {"error": {"code": "TEXT_TOO_LONG", "message": "refused"}}
        return openai_embeddings(body, DIM)

    def poisoned_sent(self) -> int:
        return sum(POISON in t for t in self.sent)


@pytest.fixture()
def model():
    m = Model()
    yield m
    m.service.close()


def corpus(tmp_path, n: int = 12, poisoned: int = 5):
    docs = {f"doc{i:02d}.txt": f"Survey note {i} about the harbour and its lanterns." for i in range(n)}
    docs[f"doc{poisoned:02d}.txt"] = f"Survey note {poisoned}: {POISON} text the service refuses."
    return write_corpus(tmp_path / "kb", docs)


def with_settings(metis: metis_pg.Metis, **values) -> metis_pg.Metis:
    """Another Metis on the same database and pool with these settings."""
    return metis_pg.Metis(metis.dsn, pool=metis.pool, settings=Settings(**values))


def test_a_refused_text_is_stored_with_its_reason_and_not_sent_again(metis, base_name, tmp_path, model):
    metis.create_base(base_name, embedding_model="test-embed", embedding_url=model.service.url, embedding_dim=DIM)
    folder = corpus(tmp_path)
    first = metis.index(base_name, folder)
    assert first.chunks_without_vector == 1 and model.poisoned_sent() >= 1
    info = metis.base(base_name)
    assert info.without_vector_by_reason == {"refused": 1, "model_unavailable": 0, "not_embedded_yet": 0}
    with metis.pool.connection() as conn:
        [(reason, detail)] = conn.execute("SELECT reason, detail FROM vector_notes n JOIN bases b USING (base_id)"
                                          " WHERE b.name = %s", (base_name,)).fetchall()
    assert reason == "refused" and "HTTP 413" in detail

    # The next run does not send the refused text again (it used to bisect down to it every run).
    sent_before = model.poisoned_sent()
    second = metis.index(base_name, folder)
    assert model.poisoned_sent() == sent_before
    assert second.chunks_without_vector == 1 and second.chunks_embedded == 0

    # Shown by reason: metis status, HTTP status, MCP status.
    status = run_cli("status", base_name, "--dsn", metis.dsn)
    assert status.code == 0 and "1 without vector (1 refused by the embedding model)" in status.stdout, status.stdout
    with TestClient(create_app(metis, tokens=""), base_url="http://127.0.0.1") as client:
        body = client.get(f"/bases/{base_name}/status").json()
        listed = {b["name"]: b for b in client.get("/bases").json()["bases"]}[base_name]  # the console's Bases page
    assert body["without_vector_by_reason"] == {"refused": 1, "model_unavailable": 0, "not_embedded_yet": 0}
    assert listed["without_vector_by_reason"]["refused"] == 1
    assert _status(metis.base(base_name))["without_vector_by_reason"]["refused"] == 1

    # Another METIS_EMBED_MAX_CHARS (a setting the refusal depended on) sends it again.
    other = with_settings(metis, embed_max_chars=4_000)
    third = other.index(base_name, folder)
    assert model.poisoned_sent() > sent_before and third.chunks_without_vector == 1


def test_chunks_left_by_a_model_down_are_noted_and_the_next_run_embeds_them(metis, base_name, tmp_path, model):
    metis.create_base(base_name, embedding_model="test-embed", embedding_url=model.service.url, embedding_dim=DIM)
    folder = corpus(tmp_path)
    model.down = True
    down = metis.index(base_name, folder)
    assert down.chunks_embedded == 0 and down.chunks_without_vector == 12
    info = metis.base(base_name)
    assert info.without_vector_by_reason == {"refused": 0, "model_unavailable": 12, "not_embedded_yet": 0}
    assert "12 without vector (12 model did not answer)" in run_cli("status", base_name, "--dsn", metis.dsn).stdout

    model.down = False
    back = with_settings(metis).index(base_name, folder)  # a later `metis index` (its model breaker closed)
    assert back.chunks_embedded == 11 and back.chunks_without_vector == 1  # retried: all but the refused one
    assert metis.base(base_name).without_vector_by_reason == {"refused": 1, "model_unavailable": 0,
                                                              "not_embedded_yet": 0}


def test_a_vector_of_a_cut_text_is_noted_cut_and_a_new_document_is_not_embedded_yet(metis, base_name, tmp_path,
                                                                                     model):
    short = with_settings(metis, embed_max_chars=100)
    short.create_base(base_name, embedding_model="test-embed", embedding_url=model.service.url, embedding_dim=DIM)
    folder = write_corpus(tmp_path / "kb", {"long.txt": "A harbour lantern survey. " * 20,
                                            "short.txt": "A short note."})
    report = short.index(base_name, folder)
    assert report.chunks_without_vector == 0
    info = short.base(base_name)
    assert info.chunks_cut == 1 and info.without_vector_by_reason["not_embedded_yet"] == 0
    assert max(len(t) for t in model.sent) == 100
    assert "1 embedded from a cut text" in run_cli("status", base_name, "--dsn", metis.dsn).stdout
    # Chunks written but not embedded yet (no reason noted): not_embedded_yet.
    with metis.pool.connection() as conn:
        conn.execute("DELETE FROM embeddings WHERE base_id = (SELECT base_id FROM bases WHERE name = %s)",
                     (base_name,))
    assert metis.base(base_name).without_vector_by_reason == {"refused": 0, "model_unavailable": 0,
                                                              "not_embedded_yet": 2}
