"""Notes (SPEC F2): documents of the source metis-<base>, searched like any document, listed, deleted."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import metis_pg
from metis_pg.cli import app

from corpus import write_corpus
from test_incremental import bm25_state


@pytest.fixture()
def with_note(metis, base_name, tmp_path):
    metis.index(base_name, write_corpus(tmp_path / "wiki", {"keeper.md": "# Keeper\n\nThe lighthouse keeper logs the weather."}))
    note_id = metis.add_note(base_name, "Lamp maintenance", "The lighthouse lamp is cleaned every Tuesday.")
    return note_id


def test_a_note_is_chunked_embedded_and_found_in_every_mode(metis, base_name, with_note):
    for mode in ("hybrid", "dense", "keyword"):
        answer = metis.search(base_name, "when is the lighthouse lamp cleaned", mode=mode, top_k=2)
        first = answer.results[0]
        assert first.citation.source == f"metis-{base_name}", mode
        assert first.citation.document == f"notes/{with_note}-lamp-maintenance.md"
        assert (first.citation.title, first.citation.kind, first.holds) == ("Lamp maintenance", "md", None)
        assert first.text == "The lighthouse lamp is cleaned every Tuesday."
    first = metis.search(base_name, "lamp cleaned Tuesday").results[0]
    assert first.scores.dense is not None and first.scores.keyword is not None


def test_sources_filter_keeps_the_notes_only(metis, base_name, with_note):
    everything = metis.search(base_name, "lighthouse")
    notes_only = metis.search(base_name, "lighthouse", filters={"sources": [f"metis-{base_name}"]})

    assert {r.citation.source for r in everything.results} == {"wiki", f"metis-{base_name}"}
    assert [r.citation.document for r in notes_only.results] == [f"notes/{with_note}-lamp-maintenance.md"]


def test_notes_are_listed_and_deleted_with_everything_they_own(metis, base_name, with_note):
    [note] = metis.notes(base_name)
    assert (note.note_id, note.title, note.text) == (with_note, "Lamp maintenance",
                                                     "The lighthouse lamp is cleaned every Tuesday.")

    metis.delete_note(base_name, with_note)

    assert metis.notes(base_name) == []
    assert metis.search(base_name, "tuesday", mode="keyword").results == ()
    state = bm25_state(metis, base_name)
    assert (state["documents"], state["chunks"], state["embeddings"]) == (1, 1, 1)
    assert "tuesday" not in state["df"]
    with pytest.raises(metis_pg.NotFound, match="has no note"):
        metis.delete_note(base_name, with_note)


def test_reindexing_the_folder_keeps_the_notes(metis, base_name, with_note, tmp_path):
    report = metis.index(base_name, tmp_path / "wiki")

    assert (report.unchanged, report.deleted) == (1, 0)
    assert [n.note_id for n in metis.notes(base_name)] == [with_note]


def test_the_notes_source_name_is_reserved(metis, base_name, tmp_path):
    folder = write_corpus(tmp_path / "x", {"a.txt": "Some text."})
    with pytest.raises(metis_pg.InvalidInput, match="reserved"):
        metis.index(base_name, folder, source=f"metis-{base_name}")


@pytest.mark.parametrize(("title", "text"), [("", "text"), ("two\nlines", "text"), ("Title", "  ")])
def test_bad_notes_are_refused(metis, base_name, title, text):
    metis.create_base(base_name)
    with pytest.raises(metis_pg.InvalidInput):
        metis.add_note(base_name, title, text)


def test_note_commands_add_list_delete(metis, base_name):
    runner = CliRunner()
    metis.create_base(base_name)

    added = runner.invoke(app, ["note", "add", base_name, "--title", "Release plan", "The reranker ships in Q1.",
                                "--json", "--dsn", metis.dsn])
    assert added.exit_code == 0, added.output
    note_id = json.loads(added.stdout)["note_id"]
    listed = runner.invoke(app, ["note", "list", base_name, "--dsn", metis.dsn])
    assert listed.exit_code == 0 and f"{note_id}. Release plan" in listed.output
    found = runner.invoke(app, ["search", base_name, "reranker ships", "--source", f"metis-{base_name}",
                                "--json", "--dsn", metis.dsn])
    assert [r["citation"]["document"] for r in json.loads(found.stdout)["results"]] == [
        f"notes/{note_id}-release-plan.md"]
    deleted = runner.invoke(app, ["note", "delete", base_name, str(note_id), "--dsn", metis.dsn])
    assert deleted.exit_code == 0 and f"deleted note {note_id}" in deleted.output
    assert metis.notes(base_name) == []
