"""Each distinct embedding text is embedded once (issue 24): within a run, across runs, never a wrong vector."""

from __future__ import annotations

import time

import numpy as np

import metis_pg
from metis_pg import storage
from metis_pg.chunking import embedding_text

from corpus import write_corpus
from model_servers import FakeService, embedding_service, hashed_vector

DIM = 32
LICENCE = "Licensed under the Apache License, Version 2.0; you may not use this file except in compliance."


def texts_sent(service: FakeService) -> list[str]:
    """Every passage the embedding service was asked to embed (questions included)."""
    out: list[str] = []
    for _, _, body in service.requests:
        out.extend(body["input"] if isinstance(body["input"], list) else [body["input"]])
    return out


def stored(metis: metis_pg.Metis, base: str) -> list[tuple[str, np.ndarray]]:
    """(embedding text, vector) of every chunk of the base that has a vector of its model."""
    with metis.pool.connection() as conn:
        row = storage.get_base(conn, base)
        rows = conn.execute(
            "SELECT c.title, c.headings, c.text, e.embedding::real[] FROM chunks c JOIN embeddings e"
            " ON e.chunk_id = c.chunk_id AND e.model = %s WHERE c.base_id = %s",
            (row.base_spec.fingerprint, row.base_id),
        ).fetchall()
    return [(embedding_text(t, h, x), np.array(v)) for t, h, x, v in rows]


def assert_own_vectors(metis: metis_pg.Metis, base: str) -> None:
    """Every stored vector is the model's (normalized) vector of its own chunk's text, at halfvec precision."""
    for text, vector in stored(metis, base):
        expected = np.array(hashed_vector(text, DIM))
        assert np.allclose(vector, expected / np.linalg.norm(expected), atol=2e-3), text


def create(metis: metis_pg.Metis, base: str, service: FakeService) -> None:
    metis.create_base(base, embedding_model="test-embed", embedding_url=service.url, embedding_dim=DIM)


def test_identical_texts_share_one_passage_within_a_run_and_status_counts_them(metis, base_name, tmp_path):
    service = FakeService(embedding_service(DIM))
    files = {f"notice{i:02d}.txt": LICENCE for i in range(30)}
    files.update({f"own{i}.txt": f"Field report {i}: the glacier station {i} measured melt." for i in range(3)})
    folder = write_corpus(tmp_path / "kb", files)
    try:
        create(metis, base_name, service)
        report = metis.index(base_name, folder)
        sent = texts_sent(service)
        # One passage per distinct embedding text (the 30 notices: one text, their title is their first line).
        distinct = {text for text, _ in stored(metis, base_name)}
        assert sorted(sent) == sorted(distinct) and len(distinct) == 4
        assert (report.chunks_embedded, report.vectors_reused) == (33, 33 - len(distinct))
        assert_own_vectors(metis, base_name)
        info = metis.base(base_name)
        assert info.vectors_reused == 33 - len(distinct) and info.to_dict()["vectors_reused"] == info.vectors_reused
        assert report.to_dict()["vectors_reused"] == report.vectors_reused
    finally:
        service.close()


def test_a_text_the_base_already_embedded_is_not_sent_again_in_a_later_run(metis, base_name, tmp_path):
    service = FakeService(embedding_service(DIM))
    folder = write_corpus(tmp_path / "kb", {"a.md": "# Manual\n\nThe pump runs at dawn.\n\n" + LICENCE})
    try:
        create(metis, base_name, service)
        metis.index(base_name, folder)
        before = len(texts_sent(service))
        (folder / "b.md").write_text("# Manual\n\nThe pump runs at dawn.\n\n" + LICENCE)  # same title, same text
        report = metis.index(base_name, folder)
        assert report.new == 1 and report.chunks_embedded == report.vectors_reused == report.chunks
        assert len(texts_sent(service)) == before
        assert_own_vectors(metis, base_name)
    finally:
        service.close()


def test_one_file_of_thousands_of_identical_fenced_blocks_is_ready_fast(metis, base_name, tmp_path):
    service = FakeService(embedding_service(DIM))
    block = "```\nmake install PREFIX=/usr/local\n```\n\n"
    folder = write_corpus(tmp_path / "kb", {"blocks.md": "# Build\n\n" + block * 20_000})
    try:
        create(metis, base_name, service)
        started = time.monotonic()
        report = metis.index(base_name, folder)
        seconds = time.monotonic() - started
        assert report.status == "ready" and report.chunks_without_vector == 0
        assert report.chunks > 100
        sent = texts_sent(service)
        assert len(sent) == len(set(sent)) <= 5, len(sent)  # a handful of distinct chunk texts, each once
        assert report.vectors_reused == report.chunks - len(sent)
        assert_own_vectors(metis, base_name)
        print(f"{report.chunks} chunks ready in {seconds:.1f} s, {len(sent)} passages embedded")
    finally:
        service.close()


def test_a_hash_shared_by_another_text_never_gives_that_text_its_vector(metis, base_name, tmp_path):
    service = FakeService(embedding_service(DIM))
    folder = write_corpus(tmp_path / "kb", {"a.txt": "Volcanic ash grounded the northern flights."})
    try:
        create(metis, base_name, service)
        metis.index(base_name, folder)
        newcomer = "Tidal surges flooded the harbour district."
        (folder / "b.txt").write_text(newcomer)
        # Forge a collision: the stored chunk claims the hash of the newcomer's embedding text.
        with metis.pool.connection() as conn:
            row = storage.get_base(conn, base_name)
            conn.execute("UPDATE embeddings SET text_hash = %s WHERE base_id = %s",
                         (storage.text_hash(embedding_text("b", [], newcomer)), row.base_id))
            assert storage.vectors_of_texts(conn, row.base_id, row.base_spec.fingerprint,
                                            [embedding_text("b", [], newcomer)]) == {}
        report = metis.index(base_name, folder)
        assert (report.new, report.vectors_reused) == (1, 0)
        assert any("Tidal surges" in t for t in texts_sent(service))
        assert_own_vectors(metis, base_name)
    finally:
        service.close()
