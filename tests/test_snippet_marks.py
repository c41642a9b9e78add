"""Snippets mark only the question's words that weigh in the base (issue 25, item 7): "how", "do", "for",
"the" are in every passage of this base, so a question's "how do I ... for" is not marked; its rare words
are. Decided by the base's BM25 statistics (idf), not a stop list: through the CLI (JSON, and bold on a
terminal), HTTP and the rule itself on the base's own counts. The console's test is in test_console.py."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from cli_runner import run_cli
from corpus import write_corpus
from metis_pg import service
from metis_pg.snippets import marks, weighing_terms

TOPICS = ["book a meeting room", "claim travel costs", "order a laptop", "join the wiki", "print a poster",
          "renew a badge", "park a bike", "file an expense", "change a password", "find the canteen"]
CORPUS = {
    **{f"faq/{i}.md": f"# Question {i}\n\nHow do I {topic}? Ask the desk for help: they do it for you.\n"
       for i, topic in enumerate(TOPICS)},
    "faq/router.md": "# Router\n\nHow do I reset the router? Hold the red button for ten seconds to reset the router.\n",
}
QUESTION = "how do I reset the router for"


@pytest.fixture()
def indexed(dsn, base_name, tmp_path: Path) -> str:
    result = run_cli("index", str(write_corpus(tmp_path / "kb", CORPUS)), "--base", base_name, "--dsn", dsn)
    assert result.code == 0, result.stderr
    return base_name


def marked_words(citation: dict) -> list[str]:
    return [citation["snippet"][a:b] for a, b in citation["marks"]]


def test_the_rule_on_a_base_s_counts():
    # 100 chunks: "how" in 40, "for" in 80, "the" in 95 (common: more than a tenth); "reset" in 3, "router" in 2.
    counts = {"how": 40, "do": 30, "for": 80, "the": 95, "reset": 3, "router": 2, "days": 10}
    assert weighing_terms(counts, 100) == {"reset", "router", "days"}
    # Only common words: the rarest still weighs. A base too small to tell: every word as rare as the rarest.
    assert weighing_terms({"how": 40, "for": 80}, 100) == {"how"}
    assert weighing_terms({"how": 1, "vacation": 1}, 3) == {"how", "vacation"}
    assert weighing_terms({}, 10) == frozenset()
    text = "How do I reset the router? Hold PO-2231 for ten seconds; Configuração"
    spans = marks(text, {"reset", "router", "po", "2231", "configuracao"})
    assert [text[a:b] for a, b in spans] == ["reset", "router", "PO", "2231", "Configuração"]


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "dense"])
def test_cli_json_marks_the_rare_words_not_how_do_for_the(dsn, indexed, mode):
    data = run_cli("search", indexed, QUESTION, "--mode", mode, "--json", "--dsn", dsn).json()
    router = next(r for r in data["results"] if r["citation"]["document"] == "faq/router.md")["citation"]
    assert " the " in router["snippet"] and " for " in router["snippet"]
    assert [w.lower() for w in marked_words(router)] == ["reset", "router", "reset", "router"]
    for other in data["results"]:  # the other passages hold none of the words that weigh
        assert not {w.lower() for w in marked_words(other["citation"])} - {"reset", "router"}


def test_cli_text_is_bold_on_a_terminal_only_for_the_words_that_weigh(dsn, indexed, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    out = run_cli("search", indexed, QUESTION, "--mode", "keyword", "-n", "1", "--dsn", dsn).stdout
    assert "\x1b[1mreset\x1b[0m" in out and "\x1b[1mrouter\x1b[0m" in out
    assert "\x1b[1mHow" not in out and "\x1b[1mfor" not in out and "\x1b[1mthe" not in out
    monkeypatch.delenv("FORCE_COLOR")
    plain = run_cli("search", indexed, QUESTION, "--mode", "keyword", "-n", "1", "--dsn", dsn).stdout
    assert "\x1b[" not in plain and "Hold the red button for ten seconds to reset the router." in plain


def test_http_search_and_compare_give_the_marks(metis, indexed):
    token = "test-token-" + "8" * 24
    headers = {"Authorization": f"Bearer {token}"}
    with service.running(service.create_app(metis, tokens=[token])) as url:
        answer = httpx.post(f"{url}/search", headers=headers, timeout=60,
                            json={"bases": indexed, "question": QUESTION, "top_k": 3}).json()
        compared = httpx.post(f"{url}/compare", headers=headers, timeout=60,
                              json={"bases": indexed, "question": QUESTION, "top_k": 3}).json()
    router = next(r for r in answer["results"] if r["citation"]["document"] == "faq/router.md")["citation"]
    assert [w.lower() for w in marked_words(router)] == ["reset", "router", "reset", "router"]
    words = {w.lower() for p in compared["passages"] for w in marked_words(p["citation"])}
    assert words == {"reset", "router"}


def test_cli_markdown_puts_only_the_words_that_weigh_in_bold(dsn, indexed):
    out = run_cli("search", indexed, QUESTION, "--mode", "keyword", "-n", "1", "--md", "--dsn", dsn).stdout
    assert out.startswith("1. **faq/router.md:3**")
    quoted = [line for line in out.splitlines() if line.startswith("   > ")]
    assert quoted == ["   > How do I **reset** the **router**? Hold the red button for ten seconds to **reset** the "
                      "**router**."]
