"""Two-phase indexing (issue 14): words first, searchable within seconds; then the vectors."""

from __future__ import annotations

import io
import re
import threading
import time

import pytest

import metis_pg
from metis_pg import storage

from corpus import write_corpus
from model_servers import FakeService, embedding_service, openai_embeddings

DIM = 64


def vector_counts(metis: metis_pg.Metis, base: str) -> tuple[int, int, int]:
    """(documents, chunks, chunks with a vector) of a base."""
    with metis.pool.connection() as conn:
        base_id = storage.get_base(conn, base).base_id
        return conn.execute(
            "SELECT (SELECT count(*) FROM documents WHERE base_id = %(b)s),"
            " (SELECT count(*) FROM chunks WHERE base_id = %(b)s),"
            " (SELECT count(DISTINCT chunk_id) FROM embeddings WHERE base_id = %(b)s)",
            {"b": base_id},
        ).fetchone()


def texts_sent(service: FakeService) -> list[str]:
    """Every passage the embedding service was asked to embed."""
    out: list[str] = []
    for _, _, body in service.requests:
        out.extend(body["input"] if isinstance(body["input"], list) else [body["input"]])
    return out


def wait_for(check, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"waited {timeout_s} s for {what}"
        time.sleep(0.02)


def word(i: int) -> str:
    """A made-up word only document `i` holds: ``quoaahix`` for 7."""
    return "quo" + "".join("abcdefghij"[int(c)] for c in f"{i:03d}") + "ix"


def many(n: int) -> dict[str, str]:
    """`n` one-chunk documents; ``doc007.txt`` alone holds ``word(7)``."""
    return {f"doc{i:03d}.txt": f"Survey note {i}: the {word(i)} station reported calm weather." for i in range(n)}


def test_keyword_search_finds_documents_while_their_vectors_are_still_being_embedded(metis, base_name, tmp_path):
    gate = threading.Event()

    def slow(path, body):  # passages (12 per request) only once the test has searched; a question at once
        if isinstance(body["input"], list) and len(body["input"]) > 1:
            gate.wait(30)
        return openai_embeddings(body, DIM)

    service = FakeService(slow)
    folder = write_corpus(tmp_path / "kb", many(12))
    embedded: list[tuple[int, int]] = []
    outcome: dict = {}
    try:
        metis.create_base(base_name, embedding_model="test-embed", embedding_url=service.url,
                          embedding_dim=DIM, model_timeout_s=60.0)

        def run() -> None:
            try:
                outcome["report"] = metis.index(base_name, folder,
                                                on_embed_progress=lambda d, t: embedded.append((d, t)))
            except BaseException as exc:  # noqa: BLE001 - shown by the assert below
                outcome["error"] = exc

        indexer = threading.Thread(target=run)
        indexer.start()
        try:
            # Every document's words are written while the model has not answered once.
            wait_for(lambda: vector_counts(metis, base_name)[:2] == (12, 12), 20, "the words of every document")
            assert vector_counts(metis, base_name)[2] == 0
            assert metis.base(base_name).status == "indexing"
            hits = metis.search(base_name, word(7), mode="keyword").results
            assert [r.citation.document for r in hits] == ["doc007.txt"]
            answer = metis.search(base_name, f"{word(11)} station", top_k=3)
            said = {w.code: w.message for w in answer.warnings}
            assert "being embedded now" in said["NO_VECTOR_YET"]
            assert answer.results[0].citation.document == "doc011.txt"
        finally:
            gate.set()
            indexer.join(60)
        assert "error" not in outcome, outcome.get("error")
        report = outcome["report"]
        assert (report.new, report.chunks, report.chunks_embedded) == (12, 12, 12)
        assert (report.status, report.chunks_without_vector) == ("ready", 0)
        assert vector_counts(metis, base_name) == (12, 12, 12)
        assert metis.base(base_name).status == "ready"
        assert embedded[0] == (0, 12) and embedded[-1] == (12, 12)
        assert [d for d, _ in embedded] == sorted(d for d, _ in embedded)
        answer = metis.search(base_name, f"{word(11)} station", top_k=3)
        assert answer.warnings == () and answer.results[0].scores.dense is not None
    finally:
        gate.set()
        service.close()


def test_an_interruption_while_embedding_keeps_the_vectors_written_and_the_next_run_embeds_the_rest(
        metis, base_name, tmp_path):
    service = FakeService(embedding_service(DIM))
    folder = write_corpus(tmp_path / "kb", many(150))
    try:
        metis.create_base(base_name, embedding_model="test-embed", embedding_url=service.url,
                          embedding_dim=DIM, model_timeout_s=30.0)
        embedder = metis.embedder(metis_pg.BaseSpec.from_json(metis._base_row(base_name).spec))
        real = embedder.embed_passages
        batches = {"n": 0}

        def ctrl_c_at_the_third_batch(texts):
            batches["n"] += 1
            if batches["n"] == 3:
                raise KeyboardInterrupt
            return real(texts)

        embedder.embed_passages = ctrl_c_at_the_third_batch
        with pytest.raises(KeyboardInterrupt):
            metis.index(base_name, folder)
        documents, chunks, with_vector = vector_counts(metis, base_name)
        assert (documents, chunks) == (150, 150)  # every word written in phase 1
        assert with_vector == 128  # two batches of 64 written; the third was lost
        info = metis.base(base_name)
        assert (info.status, info.chunks_without_vector) == ("waiting", 22)
        assert [r.citation.document for r in metis.search(base_name, word(149), mode="keyword").results] == [
            "doc149.txt"]

        embedder.embed_passages = real
        sent_before = len(texts_sent(service))
        report = metis.index(base_name, folder)
        assert (report.unchanged, report.new, report.chunks_embedded) == (150, 0, 22)
        assert len(texts_sent(service)) - sent_before == 22  # only the rest
        assert (report.status, report.chunks_without_vector) == ("ready", 0)
        assert vector_counts(metis, base_name) == (150, 150, 150)
    finally:
        service.close()


def test_a_changed_document_reuses_the_vectors_of_its_unchanged_chunk_texts(metis, base_name, tmp_path):
    filler = "It goes on about the same matter for a while, so that each part is a chunk of its own. " * 2
    sections = [f"## Part {i}\n\nThe part {i} text talks about subject{i}. {filler}\n" for i in range(6)]
    service = FakeService(embedding_service(DIM))
    try:
        metis.create_base(base_name, embedding_model="test-embed", embedding_url=service.url,
                          embedding_dim=DIM, model_timeout_s=30.0, chunk_size=200)
        folder = write_corpus(tmp_path / "kb", {"guide.md": "# Guide\n\n" + "\n".join(sections)})
        first = metis.index(base_name, folder)
        assert first.chunks >= 6 and first.chunks_embedded == first.chunks
        assert len(texts_sent(service)) == first.chunks

        sections[3] = f"## Part 3\n\nThe part 3 text now talks about otter colonies. {filler}\n"
        (folder / "guide.md").write_text("# Guide\n\n" + "\n".join(sections))
        sent_before = len(texts_sent(service))
        report = metis.index(base_name, folder)

        new_texts = texts_sent(service)[sent_before:]
        assert report.changed == 1 and report.chunks_embedded == 1
        assert len(new_texts) == 1 and "otter" in new_texts[0]
        assert report.status == "ready" and vector_counts(metis, base_name)[1:] == (first.chunks, first.chunks)
    finally:
        service.close()


def test_metis_index_shows_an_embedding_bar_after_the_documents_bar(metis, base_name, tmp_path):
    from rich.console import Console

    from metis_pg.cli.progress import index_with_progress
    from metis_pg.cli.render import Renderer

    screen = io.StringIO()
    shown_on = Renderer(err=Console(file=screen, force_terminal=True, width=200, color_system=None))
    service = FakeService(embedding_service(DIM))
    try:
        metis.create_base(base_name, embedding_model="test-embed", embedding_url=service.url,
                          embedding_dim=DIM, model_timeout_s=30.0)
        folder = write_corpus(tmp_path / "kb", many(12))
        report = index_with_progress(shown_on, metis, base_name, [folder], None, quiet=False)
    finally:
        service.close()
    assert (report.chunks_embedded, report.status) == (12, "ready")
    shown = screen.getvalue()
    assert re.search(r"indexing\s.*12/12 documents", shown), shown
    assert re.search(r"embedding\s.*12/12 chunks · [\d.]+ chunks/s", shown), shown
