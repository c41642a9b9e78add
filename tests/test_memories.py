"""Memories (SPEC F11): a newer fact replaces an older one; facts that hold come first; old ones stay findable."""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

import metis_pg
from metis_pg.cli import app
from metis_pg.memories import order_facts

GENERATIONS = ("Ana works on billing", "Ana works on search", "Ana works on the reranker")
OTHERS = ("Bruno leads the infrastructure team", "The office moves to Lisbon in December")


def test_order_facts_moves_replaced_facts_last_keeping_each_group_in_ranked_order():
    ranked = [SimpleNamespace(name=n, holds=h) for n, h in
              (("a", False), ("b", None), ("c", True), ("d", False), ("e", True))]

    assert [r.name for r in order_facts(ranked)] == ["b", "c", "e", "a", "d"]
    assert order_facts([]) == []


@pytest.fixture(scope="module")
def memory(metis):
    """A memory base with three generations of Ana's role (by key, then by id) and two other facts."""
    name = f"t-mem-{uuid.uuid4().hex[:8]}"
    metis.create_base(name, kind="memory")
    first = metis.remember(name, GENERATIONS[0], key="ana/role", observed_at="2026-09-01")
    second = metis.remember(name, GENERATIONS[1], key="ana/role", observed_at="2026-10-01")
    third = metis.remember(name, GENERATIONS[2], supersedes=second, observed_at="2026-11-01")
    for i, text in enumerate(OTHERS):
        metis.remember(name, text, key=f"other/{i}")
    yield SimpleNamespace(name=name, ids=(first, second, third))
    metis.drop_base(name)


def test_a_newer_fact_with_the_key_or_naming_the_old_one_replaces_it(metis, memory):
    first, second, third = memory.ids
    facts = {f.fact_id: f for f in metis.facts(memory.name)}

    assert len(facts) == 5
    assert (facts[first].holds, facts[first].superseded_by, facts[first].superseded_at[:10]) == (False, second, "2026-10-01")
    assert (facts[second].holds, facts[second].superseded_by, facts[second].superseded_at[:10]) == (False, third, "2026-11-01")
    assert (facts[third].holds, facts[third].superseded_by, facts[third].key) == (True, None, "ana/role")
    assert [f.text for f in metis.facts(memory.name, holding_only=True)] == [GENERATIONS[2], *OTHERS]


def test_what_ana_works_on_answers_the_current_fact_first(metis, memory):
    answer = metis.search(memory.name, "What does Ana work on?", top_k=5)

    texts = [r.text for r in answer.results]
    assert len(texts) == 5
    assert texts[0] == GENERATIONS[2] and answer.results[0].holds is True
    assert [r.holds for r in answer.results] == [True, True, True, False, False]
    assert set(texts[3:]) == set(GENERATIONS[:2])
    assert all("holds" in r for r in answer.to_dict()["results"])


def test_ana_in_september_still_finds_the_old_facts_below_those_that_hold(metis, memory):
    answer = metis.search(memory.name, "What was Ana's role in September?", top_k=5)

    by_text = {r.text: r for r in answer.results}
    assert set(GENERATIONS) <= set(by_text)
    assert (by_text[GENERATIONS[0]].holds, by_text[GENERATIONS[1]].holds, by_text[GENERATIONS[2]].holds) == (
        False, False, True)
    holds = [r.holds for r in answer.results]
    assert holds == sorted(holds, reverse=True)  # every fact that holds before every replaced one


def test_a_replaced_fact_ranked_first_comes_after_the_facts_that_hold(metis, memory):
    answer = metis.search(memory.name, "billing", top_k=5)

    best = max(answer.results, key=lambda r: r.scores.fused)
    assert best.text == GENERATIONS[0] and best.holds is False
    replaced = [r for r in answer.results if r.holds is False]
    assert [r.text for r in replaced] == list(GENERATIONS[:2])
    assert answer.results[len(answer.results) - len(replaced)].text == GENERATIONS[0]  # first after those that hold
    # Each group keeps its ranked (fused) order.
    assert [r.scores.fused for r in replaced] == sorted((r.scores.fused for r in replaced), reverse=True)


def test_an_older_observation_is_stored_as_replaced_by_the_fact_that_holds(metis, base_name):
    metis.create_base(base_name, kind="memory")
    current = metis.remember(base_name, "Ana works on search", key="ana/role", observed_at="2026-10-01")

    late = metis.remember(base_name, "Ana worked on billing", key="ana/role", observed_at="2026-09-01")

    facts = {f.fact_id: f for f in metis.facts(base_name)}
    assert (facts[current].holds, facts[late].holds, facts[late].superseded_by) == (True, False, current)


def test_a_fact_restated_word_for_word_after_a_change_is_found_and_holds(metis, base_name):
    """A fact that changes back (Tuesday, then Thursday, then Tuesday again) has two copies of one text.
    With copies collapsed in each leg (the default since issue 20) the copy kept is the one that still
    holds, in the place of the text's best copy: the search answers the fact that holds first, once.
    (Keeping the best-ranked copy answered replaced facts only; 6235f1e then kept every copy of a
    memory base.) With copies kept, both come, the one that holds first."""
    metis.create_base(base_name, kind="memory")
    first = metis.remember(base_name, "The team meets on Tuesday.", key="meeting")
    moved = metis.remember(base_name, "The team meets on Thursday.", key="meeting", supersedes=first)
    back = metis.remember(base_name, "The team meets on Tuesday.", key="meeting", supersedes=moved)
    for mode in ("keyword", "hybrid"):
        results = metis.search(base_name, "when does the team meet", mode=mode).results
        assert [(r.text, r.holds) for r in results] == [
            ("The team meets on Tuesday.", True), ("The team meets on Thursday.", False)], mode
        kept = metis.search(base_name, "when does the team meet", mode=mode, fusion={"collapse_copies": False})
        kept = [(r.text, r.holds) for r in kept.results]
        assert kept[0] == ("The team meets on Tuesday.", True) and sorted(kept[1:]) == [
            ("The team meets on Thursday.", False), ("The team meets on Tuesday.", False)], mode
    assert {f.fact_id: f.holds for f in metis.facts(base_name)} == {first: False, moved: False, back: True}


def test_a_memory_base_collapses_copies_that_all_hold(metis, base_name):
    """Two facts of one text that both hold (two keys) take one place, as copies do in any base."""
    metis.create_base(base_name, kind="memory")
    metis.remember(base_name, "The office is closed on Friday.", key="office/hours")
    metis.remember(base_name, "The office is closed on Friday.", key="office/holiday")
    metis.remember(base_name, "Lunch is served at noon.", key="office/lunch")
    for mode in ("keyword", "hybrid"):
        collapsed = metis.search(base_name, "is the office closed on friday", mode=mode).results
        assert [(r.text, r.holds) for r in collapsed][:2] == [
            ("The office is closed on Friday.", True), ("Lunch is served at noon.", True)], mode
        kept = metis.search(base_name, "is the office closed on friday", mode=mode, fusion={"collapse_copies": False})
        assert [r.text for r in kept.results].count("The office is closed on Friday.") == 2, mode


def test_copies_across_memory_bases_keep_the_one_that_holds(metis, base_name):
    """Two memory bases searched at once (one statement per base, fused by retrieval.fuse_bases): the
    replaced copy in one base and the copy that holds in the other take one place, held by the latter."""
    other = f"{base_name}-b"
    metis.create_base(base_name, kind="memory")
    metis.create_base(other, kind="memory")
    try:
        first = metis.remember(base_name, "The team meets on Tuesday.", key="meeting")
        metis.remember(base_name, "The team meets on Thursday.", key="meeting", supersedes=first)
        metis.remember(other, "The team meets on Tuesday.", key="meeting")
        for mode in ("keyword", "hybrid"):
            results = metis.search([base_name, other], "when does the team meet on tuesday", mode=mode).results
            assert [(r.text, r.holds, r.base) for r in results] == [
                ("The team meets on Tuesday.", True, other), ("The team meets on Thursday.", True, base_name)], mode
    finally:
        metis.drop_base(other)


def test_supersedes_must_name_a_fact_that_holds(metis, memory, base_name):
    first, _, _ = memory.ids
    with pytest.raises(metis_pg.InvalidInput, match="already replaced"):
        metis.remember(memory.name, "Ana works on docs", supersedes=first)
    with pytest.raises(metis_pg.InvalidInput, match="has no fact"):
        metis.remember(memory.name, "Ana works on docs", supersedes=10**12)
    metis.create_base(base_name)
    with pytest.raises(metis_pg.InvalidInput, match="kind memory"):
        metis.remember(base_name, "Ana works on docs")


def test_remember_and_facts_commands(metis, base_name):
    runner = CliRunner()
    metis.create_base(base_name, kind="memory")

    first = runner.invoke(app, ["remember", base_name, "Ana works on billing", "--key", "ana/role",
                                "--observed-at", "2026-09-01", "--json", "--dsn", metis.dsn])
    second = runner.invoke(app, ["remember", base_name, "Ana works on search", "--key", "ana/role",
                                 "--json", "--dsn", metis.dsn])
    listed = runner.invoke(app, ["facts", base_name, "--json", "--dsn", metis.dsn])

    assert (first.exit_code, second.exit_code, listed.exit_code) == (0, 0, 0), listed.output
    first_id, second_id = json.loads(first.stdout)["fact_id"], json.loads(second.stdout)["fact_id"]
    assert [(f["fact_id"], f["holds"], f["superseded_by"]) for f in json.loads(listed.stdout)] == [
        (first_id, False, second_id), (second_id, True, None)]
    shown = runner.invoke(app, ["search", base_name, "Ana billing", "--mode", "keyword", "--dsn", metis.dsn])
    assert shown.exit_code == 0 and "replaced" in shown.output and "holds" in shown.output
