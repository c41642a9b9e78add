"""The console (issue 11) in a real headless Chromium: Search, Compare, search URLs, Bases, sign-in.

One service (the real app under uvicorn, with a token and a source root) and one
browser serve the whole module; one base of six small documents, embedded by the
hashed bag of words of ``tests/hash_embedder.py`` and reranked by a word-overlap
reranker, both real HTTP servers on 127.0.0.1 (the embedder is stopped by one test).
What the page shows is checked against what the Python API answers.

The browser is Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs
them). Without them these tests fail when ``CI=true`` and are skipped otherwise,
with the reason.

``METIS_CONSOLE_SCREENSHOTS=docs/console`` writes the screenshots of docs/console.md.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

import metis_pg
from metis_pg import service

import hash_embedder
from corpus import write_corpus
from model_servers import EosServer, FakeService, openai_embeddings

TOKEN = "console-token-" + "5" * 24
WRONG_TOKEN = "console-token-" + "6" * 24
SHOTS = os.environ.get("METIS_CONSOLE_SCREENSHOTS")

CORPUS = {
    "orders.txt": "Purchase order PO-2231 was approved on Monday. Purchase orders need two signatures.",
    "router.txt": "Reset the router using the red button for ten seconds.",
    "modem.txt": "Error E4021 means the modem failed to authenticate. Restart the modem after the error.",
    "guide/leave.md": "# Handbook\n\n## Vacation\n\nFull-time staff get 25 days of paid vacation per calendar year.\n",
    "guide/travel.md": "# Handbook\n\n## Travel\n\nBook flights for business travel through the travel desk.\n",
    "help.html": "<html><head><title>Help desk</title></head><body><p>The help desk resets passwords and "
                 "routers for staff.</p></body></html>",
}
MORE = {
    "wiki.md": "# Wiki\n\nThe lighthouse keeper logs the harbour inventory every evening.\n",
    "faq.txt": "Questions about the harbour go to the harbour master.",
    "log.txt": "The harbour inventory lists ropes, buoys and lamps.",
}


def overlap_reranker(path: str, body: Any) -> tuple[int, Any]:
    """A Cohere-style reranker: the share of the question's words each document holds."""
    words = set(re.findall(r"\w+", body["query"].lower()))
    scored = [{"index": i, "relevance_score": len(words & set(re.findall(r"\w+", d.lower()))) / max(1, len(words))}
              for i, d in enumerate(body["documents"])]
    scored.sort(key=lambda r: -r["relevance_score"])
    return 200, {"results": scored[: body.get("top_n") or len(scored)]}


# -- the service and its base --------------------------------------------------------------------------


class Models:
    """The embedder (an Eos server that a test stops and restarts on its port) and the reranker."""

    def __init__(self) -> None:
        self.embedder = EosServer(embedder=hash_embedder.HashEmbedder())
        self.port = self.embedder.port
        self.reranker = FakeService(overlap_reranker)
        self.up = True

    def stop_embedder(self) -> None:
        self.embedder.close()
        self.up = False

    def start_embedder(self) -> None:
        if not self.up:
            self.embedder = EosServer(self.port, embedder=hash_embedder.HashEmbedder())
            self.up = True

    def close(self) -> None:
        if self.up:
            self.embedder.close()
        self.reranker.close()


@pytest.fixture(scope="module")
def models() -> Iterator[Models]:
    m = Models()
    yield m
    m.close()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    top = tmp_path_factory.mktemp("console")
    write_corpus(top / "kb", CORPUS)
    write_corpus(top / "more", MORE)
    return top


@pytest.fixture(scope="module")
def base(metis: metis_pg.Metis, models: Models, root: Path) -> Iterator[str]:
    name = f"t-console-{uuid.uuid4().hex[:6]}"
    metis.create_base(name, embedding_model=hash_embedder.MODEL, embedding_url=f"http://127.0.0.1:{models.port}",
                      embedding_dim=hash_embedder.DIM, reranker_model="overlap", reranker_url=models.reranker.url,
                      model_timeout_s=2.0)
    report = metis.index(name, root / "kb")
    assert report.new == len(CORPUS) and not report.failed and report.chunks_without_vector == 0
    yield name
    metis.drop_base(name)


@pytest.fixture(scope="module")
def url(metis: metis_pg.Metis, root: Path, base: str) -> Iterator[str]:
    app = service.create_app(metis, tokens=[TOKEN], source_roots=[root])
    with service.running(app) as base_url:
        yield base_url


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if not (chromium and chromedriver):
        message = ("the console tests need Debian's chromium and chromium-driver "
                   "(apt-get install -y chromium chromium-driver; .ci/run does)")
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900", "--force-device-scale-factor=1", "--lang=en-US",
                "--disable-extensions", "--no-first-run", "--disable-background-networking"):
        options.add_argument(arg)
    browser = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=chromedriver))
    browser.set_page_load_timeout(30)
    try:
        yield browser
    finally:
        browser.quit()


# -- helpers -------------------------------------------------------------------------------------------


def wait(driver: Any, condition: Callable[[Any], Any], timeout_s: float = 15, what: str = "") -> Any:
    try:
        return WebDriverWait(driver, timeout_s, poll_frequency=0.05,
                             ignored_exceptions=(StaleElementReferenceException,)).until(condition)
    except TimeoutException:
        error = driver.find_element(By.ID, "page-error").text
        raise AssertionError(f"timed out waiting for {what or condition}; page error: {error!r}") from None


def shown(driver: Any, element_id: str) -> bool:
    return driver.find_element(By.ID, element_id).is_displayed()


def open_page(driver: Any, address: str) -> None:
    """Open `address`, signing in when the page asks; return once the page's main part is shown."""
    driver.get(address)
    wait(driver, lambda d: shown(d, "main") or shown(d, "sign-in"), what="the page or the sign-in")
    if shown(driver, "sign-in"):
        token = driver.find_element(By.ID, "token")
        token.send_keys(TOKEN + Keys.ENTER)
        wait(driver, lambda d: shown(d, "main"), what="the page after signing in")


def open_search(driver: Any, url: str, fragment: str = "") -> None:
    open_page(driver, f"{url}/{fragment}")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "input[name='base']"), what="the bases")
    if "q=" in fragment:
        wait(driver, lambda d: d.find_element(By.ID, "answer").get_attribute("data-answered"), what="the answer")


def answered(driver: Any) -> int:
    return int(driver.find_element(By.ID, "answer").get_attribute("data-answered") or 0)


def ask(driver: Any, question: str, *, bases: list[str] | None = None) -> None:
    """Type `question` and press Enter (ticking `bases` first); return once the answer is shown."""
    if bases is not None:
        for box in driver.find_elements(By.CSS_SELECTOR, "input[name='base']"):
            if box.is_selected() != (box.get_attribute("value") in bases):
                box.click()
    before = answered(driver)
    q = driver.find_element(By.ID, "q")
    q.clear()
    q.send_keys(question + Keys.ENTER)
    wait(driver, lambda d: answered(d) > before, what=f"the answer to {question!r}")


def tick(driver: Any, selector: str, on: bool = True) -> None:
    box = driver.find_element(By.CSS_SELECTOR, selector)
    if box.is_selected() != on:
        box.click()


def cites(driver: Any) -> list[str]:
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#results .result .cite")]


def cell(driver: Any, base: str, column: str) -> str | None:
    """The text of a column (class name) of the row of `base` on the Bases page, read at once (rows are redrawn)."""
    return driver.execute_script(
        "const td = document.querySelector(`#bases-table tr[data-base='${arguments[0]}'] .${arguments[1]}`);"
        "return td ? td.innerText.trim() : null;", base, column)


def screenshot(driver: Any, name: str, max_height: int = 1500) -> None:
    """Save the whole page (up to `max_height` px) as `name` under $METIS_CONSOLE_SCREENSHOTS, when it is set."""
    if not SHOTS:
        return
    folder = Path(SHOTS)
    folder.mkdir(parents=True, exist_ok=True)
    width, height = driver.get_window_size()["width"], driver.get_window_size()["height"]
    driver.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
    page = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(max(page + 140, height), max_height))  # + the window's own frame
    try:
        driver.save_screenshot(str(folder / name))
    finally:
        driver.set_window_size(width, height)


# -- tests ---------------------------------------------------------------------------------------------


def test_pages_need_no_token_hold_no_inline_script_and_send_a_strict_csp(url):
    page = httpx.get(f"{url}/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp and "unsafe" not in csp
    assert page.headers["x-content-type-options"] == "nosniff" and page.headers["referrer-policy"] == "no-referrer"
    scripts = re.findall(r"<script\b[^>]*>", page.text)
    assert scripts and all(re.search(r'\bsrc="/console/static/[\w.]+\.js"', s) for s in scripts), scripts
    assert not re.search(r"<script\b[^>]*>\s*[^<\s]", page.text), "an inline script"
    assert not re.search(r"<[^>]*\son[a-z]+\s*=", page.text), "an inline event handler"
    assert " style=" not in page.text and "<style" not in page.text
    bases_page = httpx.get(f"{url}/console/bases")
    assert bases_page.status_code == 200 and bases_page.headers["content-security-policy"] == csp
    script = httpx.get(f"{url}/console/static/search.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    # The pages are open; the data is not, not even through a path that only starts like the console's.
    assert httpx.get(f"{url}/bases").status_code == 401
    assert httpx.post(f"{url}/search", json={"bases": "x", "question": "y"}).status_code == 401
    host, port = url.removeprefix("http://").split(":")
    for raw in ("/console/../bases", "/console/static/../../app.py", "/console/static/%2e%2e/__init__.py"):
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        connection.request("GET", raw)  # sent as it is (httpx would remove the dot segments)
        answer = connection.getresponse()
        body = answer.read()
        connection.close()
        assert answer.status == 404 and b"bases" not in body.replace(raw.encode(), b"") and b"import" not in body, \
            (raw, answer.status, body[:200])


def test_without_tokens_the_console_opens_without_a_sign_in(driver, metis, root, base):
    app = service.create_app(metis, tokens=[], source_roots=[root])
    with service.running(app) as open_url:
        driver.get(f"{open_url}/")
        driver.execute_script("sessionStorage.clear()")
        driver.get(f"{open_url}/#q=modem&base={base}&mode=keyword")
        wait(driver, lambda d: cites(d), what="the results")
        assert not shown(driver, "sign-in") and not shown(driver, "sign-out")
        assert cites(driver)[0] == "modem.txt:1"


def test_a_wrong_token_shows_the_sign_in_again(driver, url, base):
    driver.get(f"{url}/")
    driver.execute_script("sessionStorage.clear()")
    driver.get(f"{url}/")
    wait(driver, lambda d: shown(d, "sign-in"), what="the sign-in")
    assert not shown(driver, "main")
    driver.find_element(By.ID, "token").send_keys(WRONG_TOKEN + Keys.ENTER)
    wait(driver, lambda d: "not accepted" in d.find_element(By.ID, "sign-in-error").text, what="the refusal")
    assert shown(driver, "sign-in") and not shown(driver, "main")
    assert driver.execute_script("return sessionStorage.getItem('metis-token')") is None
    assert driver.switch_to.active_element.get_attribute("id") == "token"

    driver.find_element(By.ID, "token").send_keys(TOKEN + Keys.ENTER)
    wait(driver, lambda d: shown(d, "main"), what="the page after signing in")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f"input[name='base'][value='{base}']"), what="the base")
    assert TOKEN not in driver.current_url
    assert driver.execute_script("return sessionStorage.getItem('metis-token')") == TOKEN

    # A token the service stops accepting (here: replaced by a wrong one) brings the sign-in back.
    driver.execute_script("sessionStorage.setItem('metis-token', arguments[0])", WRONG_TOKEN)
    driver.get(f"{url}/console/bases")
    wait(driver, lambda d: shown(d, "sign-in"), what="the sign-in again")
    assert "not accepted" in driver.find_element(By.ID, "sign-in-error").text
    assert not shown(driver, "main")
    driver.find_element(By.ID, "token").send_keys(TOKEN + Keys.ENTER)
    wait(driver, lambda d: shown(d, "main"), what="the Bases page after signing in")


def test_a_question_and_enter_give_cited_results_with_the_scores_line(driver, url, base, metis):
    open_search(driver, url)
    question = "modem error E4021"
    ask(driver, question, bases=[base])
    want = metis.search(base, question)
    assert want.reranked and want.results[0].citation.document == "modem.txt"
    assert cites(driver) == [r.citation.location() for r in want.results]

    first = driver.find_element(By.CSS_SELECTOR, "#results .result")
    top = want.results[0]
    assert first.find_element(By.CSS_SELECTOR, ".cite").text == "modem.txt:1"
    assert first.find_element(By.CSS_SELECTOR, ".base").text == base
    assert first.find_element(By.CSS_SELECTOR, ".title").text == top.citation.title
    line = first.find_element(By.CSS_SELECTOR, ".scores").text
    assert line == top.scores.line()
    assert re.fullmatch(r"meaning \d\.\d{3} \(#\d+\) · words \d+\.\d{2} \(#\d+\) · fused \d\.\d{4} · reranker \d\.\d{3}",
                        line), line
    # Every result's line, absent steps left out (a passage no leg of words found has no "words").
    lines = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#results .scores")]
    assert lines == [r.scores.line() for r in want.results]
    marks = {m.text.lower() for m in first.find_elements(By.CSS_SELECTOR, ".snippet mark")}
    assert {"modem", "error", "e4021"} <= marks, marks

    first.find_element(By.CSS_SELECTOR, "details.whole summary").click()
    assert first.find_element(By.CSS_SELECTOR, "details.whole pre").text == top.text
    took = driver.find_element(By.ID, "took").text
    assert re.fullmatch(r"embed [\d.]+ ms · meaning [\d.]+ ms · words [\d.]+ ms · fuse [\d.]+ ms · rerank [\d.]+ ms"
                        r" · total [\d.]+ ms", took), took
    assert "reranked" in driver.find_element(By.ID, "summary").text
    assert "q=modem+error+E4021" in driver.current_url and f"base={base}" in driver.current_url
    # The question stays in the fragment: no request the page made carries it (so no access log has it).
    requested = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert any(r.endswith("/search") for r in requested) and not any("E4021" in r for r in requested), requested
    screenshot(driver, "search.png")

    # Rerank cleared: no reranker step, and the URL says so.
    tick(driver, "#rerank", on=False)
    ask(driver, question)
    assert "reranker" not in driver.find_element(By.CSS_SELECTOR, "#results .scores").text
    assert "rerank=0" in driver.current_url


def test_compare_lists_every_passage_with_its_rank_both_meaning_words_and_why(driver, url, base, metis):
    open_search(driver, url)
    tick(driver, "#compare")
    assert not driver.find_element(By.CSS_SELECTOR, "input[name='mode'][value='dense']").is_enabled()
    top_k = driver.find_element(By.ID, "top_k")
    top_k.clear()
    top_k.send_keys("3")  # fewer than the passages: some are found by one mode only
    question = "help desk staff vacation"
    ask(driver, question, bases=[base])
    want = metis.compare(base, question, top_k=3).to_dict()
    heads = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#compare-table thead th")]
    assert heads == ["Passage", "Both", "Meaning", "Words", "Why it came up"]
    rows = driver.find_elements(By.CSS_SELECTOR, "#compare-table tbody tr")
    assert len(rows) == len(want["passages"]) > 0

    def rank(r: int | None) -> str:
        return "—" if r is None else f"#{r}"

    got = [[row.find_element(By.CSS_SELECTOR, ".cite").text] + [td.text for td in row.find_elements(By.TAG_NAME, "td")]
           for row in rows]
    assert got == [[location(p["citation"]), rank(p["ranks"]["hybrid"]), rank(p["ranks"]["dense"]),
                    rank(p["ranks"]["keyword"]), p["why"]] for p in want["passages"]]
    whys = " ".join(p["why"] for p in want["passages"])
    assert "close in meaning" in whys and "the reranker scored it" in whys
    assert {p["agreement"] for p in want["passages"]} == {"both", "words", "meaning"}, whys
    assert "compare=1" in driver.current_url
    assert not shown(driver, "results") or not cites(driver)
    screenshot(driver, "compare.png")


def location(citation: dict[str, Any]) -> str:
    if citation.get("page") is not None:
        return f"{citation['document']} p.{citation['page']}"
    if citation.get("line") is not None:
        return f"{citation['document']}:{citation['line']}"
    return citation["document"]


def test_a_kind_filter_brings_back_only_that_kind(driver, url, base, metis):
    open_search(driver, url)
    question = "handbook staff travel desk help"
    ask(driver, question, bases=[base])
    assert any(not c.split(":")[0].endswith(".md") for c in cites(driver)), "the filter must change something"
    tick(driver, "input[name='kind'][value='md']")
    ask(driver, question)
    got = cites(driver)
    want = metis.search(base, question, filters={"kinds": ["md"]})
    assert got == [r.citation.location() for r in want.results] and len(got) == 2
    assert all(c.split(":")[0].endswith(".md") for c in got), got
    assert "kind=md" in driver.current_url

    # A folder prefix; then a source no base has (a typo): its warning, and no results.
    tick(driver, "input[name='kind'][value='md']", on=False)
    driver.find_element(By.ID, "prefix").send_keys("guide/")
    ask(driver, question)
    assert cites(driver) and all(c.startswith("guide/") for c in cites(driver)), cites(driver)
    assert "prefix=guide%2F" in driver.current_url
    driver.find_element(By.ID, "sources").send_keys("handbok")
    ask(driver, question)
    notice = driver.find_element(By.CSS_SELECTOR, "#notices .notice[data-code='UNKNOWN_SOURCE']")
    assert "handbok" in notice.text and not cites(driver)
    assert "source=handbok" in driver.current_url


def test_a_search_url_reproduces_it_and_back_and_forward_move_between_searches(driver, url, base):
    open_search(driver, url)
    driver.find_element(By.CSS_SELECTOR, "input[name='mode'][value='keyword']").click()
    top_k = driver.find_element(By.ID, "top_k")
    top_k.clear()
    top_k.send_keys("3")
    ask(driver, "purchase order signatures", bases=[base])
    first_url, first = driver.current_url, cites(driver)
    assert first and first[0] == "orders.txt:1" and len(first) <= 3
    assert "mode=keyword" in first_url and "top_k=3" in first_url

    ask(driver, "vacation days")
    second_url, second = driver.current_url, cites(driver)
    assert second != first

    before = answered(driver)
    driver.back()
    wait(driver, lambda d: answered(d) > before, what="the first search again")
    assert driver.current_url == first_url and cites(driver) == first
    assert driver.find_element(By.ID, "q").get_attribute("value") == "purchase order signatures"
    before = answered(driver)
    driver.forward()
    wait(driver, lambda d: answered(d) > before, what="the second search again")
    assert driver.current_url == second_url and cites(driver) == second

    # Opened afresh (bookmarked, shared): the same search, the same form.
    driver.get("about:blank")
    open_search(driver, url, first_url[first_url.index("#"):])
    assert cites(driver) == first
    assert driver.find_element(By.ID, "q").get_attribute("value") == "purchase order signatures"
    assert driver.find_element(By.CSS_SELECTOR, "input[name='mode'][value='keyword']").is_selected()
    assert driver.find_element(By.ID, "top_k").get_attribute("value") == "3"
    assert driver.find_element(By.CSS_SELECTOR, f"input[name='base'][value='{base}']").is_selected()


def test_keyboard_only_every_control_labelled(driver, url, base):
    open_search(driver, url, f"#base={base}")
    unlabelled = driver.execute_script("""
        return Array.from(document.querySelectorAll('input, select, textarea, button'))
          .filter(e => e.type !== 'hidden')
          .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label') && !e.textContent.trim())
          .map(e => e.outerHTML);""")
    assert unlabelled == []
    driver.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
    body = driver.find_element(By.TAG_NAME, "body")
    order = []

    def tab(shift: bool = False) -> str:
        active = driver.switch_to.active_element
        (active if active else body).send_keys((Keys.SHIFT + Keys.TAB) if shift else Keys.TAB)
        element = driver.switch_to.active_element
        return element.get_attribute("id") or element.get_attribute("value") or element.text

    for _ in range(8):
        order.append(tab())
        if order[-1] == "q":
            break
    assert order[-1] == "q", order
    assert order.index("q") <= 5, f"the question comes right after the links at the top: {order}"
    driver.switch_to.active_element.send_keys("modem error" + Keys.ENTER)
    wait(driver, lambda d: cites(d), what="results from Enter")
    assert cites(driver)[0] == "modem.txt:1"
    # On to "compare" by Tab alone, tick it with Space, on to the top_k box and Enter.
    for _ in range(12):
        if tab() == "compare":
            break
    assert driver.switch_to.active_element.get_attribute("id") == "compare"
    before = answered(driver)
    driver.switch_to.active_element.send_keys(Keys.SPACE)
    assert driver.find_element(By.ID, "compare").is_selected()
    for _ in range(4):
        if tab() == "top_k":
            break
    assert driver.switch_to.active_element.get_attribute("id") == "top_k"
    driver.switch_to.active_element.send_keys(Keys.ENTER)
    wait(driver, lambda d: answered(d) > before and shown(d, "compare-wrap"), what="the comparison")
    assert driver.find_elements(By.CSS_SELECTOR, "#compare-table tbody tr")


def test_the_embedding_model_down_shows_a_warning_and_words_still_answer(driver, url, base, models):
    open_search(driver, url)
    models.stop_embedder()
    try:
        ask(driver, "modem error E4021", bases=[base])
        notice = wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#notices .notice[data-code='KEYWORD_ONLY']"),
                      what="the warning")[0]
        assert notice.is_displayed()
        assert notice.text.startswith("Warning: ") and "results by keywords only" in notice.text, notice.text
        assert cites(driver)[0] == "modem.txt:1"
        line = driver.find_element(By.CSS_SELECTOR, "#results .scores").text
        assert line.startswith("words ") and "meaning" not in line, line
        screenshot(driver, "warning.png")
        # By meaning only cannot answer without its model: one clear sentence, no results.
        driver.find_element(By.CSS_SELECTOR, "input[name='mode'][value='dense']").click()
        ask(driver, "modem error E4021")
        error = driver.find_element(By.ID, "page-error")
        assert error.is_displayed() and error.text.endswith(".") and "\n" not in error.text, error.text
        assert not cites(driver)
    finally:
        models.start_embedder()


def test_the_bases_page_says_why_chunks_have_no_vector(driver, url, metis, tmp_path):
    """Issue 26: a text the embedding service refuses is counted by its reason on the Bases page."""
    name = f"t-console-refused-{uuid.uuid4().hex[:6]}"

    def respond(path: str, body: Any):
        if any("POISONED" in t for t in body["input"]):
            return 413, {"error": {"code": "TEXT_TOO_LONG", "message": "refused"}}
        return openai_embeddings(body, 32)

    refusing = FakeService(respond)
    try:
        metis.create_base(name, embedding_model="refusing-hash", embedding_url=refusing.url, embedding_dim=32)
        metis.index(name, write_corpus(tmp_path / "kb", {"a.txt": "A harbour note.", "b.txt": "A POISONED note."}))
        open_page(driver, f"{url}/console/bases")
        wait(driver, lambda d: cell(d, name, "without"), what="the base's row")
        assert cell(driver, name, "without") == "1 (1 refused by the model)"
    finally:
        refusing.close()
        metis.drop_base(name)


def test_the_bases_page_shows_status_indexes_live_and_keeps_notes(driver, url, base, metis, root):
    second = f"t-console2-{uuid.uuid4().hex[:6]}"
    # An embedder slow enough (0.3 s a call) for the progress to be seen between polls.
    slow = FakeService(lambda path, body: (time.sleep(0.3), openai_embeddings(body, 32))[1])
    metis.create_base(second, embedding_model="slow-hash", embedding_url=slow.url, embedding_dim=32)
    try:
        open_page(driver, f"{url}/console/bases")
        wait(driver, lambda d: cell(d, base, "status"), what="the base's row")
        assert cell(driver, base, "status") == "Ready"
        assert cell(driver, base, "documents") == str(len(CORPUS))
        assert cell(driver, base, "without") == "0"
        assert cell(driver, base, "chunks") == str(metis.base(base).chunks)
        assert hash_embedder.MODEL in cell(driver, base, "models")
        assert "reranker overlap" in cell(driver, base, "models")
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", cell(driver, base, "when"))
        assert cell(driver, second, "documents") == "0" and cell(driver, second, "when") == "never"

        driver.execute_script("""
            window.jobTexts = [];
            new MutationObserver(() => window.jobTexts.push(document.getElementById('job-state').textContent))
              .observe(document.getElementById('job-state'), {childList: true, characterData: true, subtree: true});""")
        driver.find_element(By.ID, "index-base").send_keys(second)
        driver.find_element(By.ID, "index-path").send_keys("more")
        driver.find_element(By.ID, "index-source").send_keys("harbour" + Keys.ENTER)
        wait(driver, lambda d: d.find_element(By.ID, "job").get_attribute("data-state") in ("done", "failed"),
             timeout_s=60, what="the indexing job")
        assert driver.find_element(By.ID, "job-state").text == f"Done: {second} is indexed."
        report = driver.find_element(By.ID, "job-report").text
        assert report.startswith("3 documents read: 3 new, 0 changed"), report
        texts = driver.execute_script("return window.jobTexts")
        assert any(re.fullmatch(rf"Indexing {second}: [0-3] of (3|\?) documents · \d+ chunks\.", t) for t in texts), texts
        # The row follows the base until its indexer has let go of it (a moment after the job is done).
        wait(driver, lambda d: cell(d, second, "documents") == "3" and cell(d, second, "status") == "Ready",
             what="the new counts, Ready")
        assert cell(driver, second, "without") == "0"
        assert metis.base(second).documents == 3

        # Notes: add one to the new base, see it listed and counted, delete it.
        Select(driver.find_element(By.ID, "notes-base")).select_by_value(second)
        wait(driver, lambda d: "No note" in d.find_element(By.ID, "notes-list").text, what="the empty notes")
        driver.find_element(By.ID, "note-title").send_keys("Harbour hours")
        driver.find_element(By.ID, "note-text").send_keys("The harbour office opens at seven.")
        driver.find_element(By.CSS_SELECTOR, "#note-form button[type='submit']").click()
        note = wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#notes-list li.note"), what="the note")[0]
        assert note.find_element(By.CSS_SELECTOR, ".note-title").text == "Harbour hours"
        assert [n.title for n in metis.notes(second)] == ["Harbour hours"]
        wait(driver, lambda d: cell(d, second, "documents") == "4", what="the note counted")
        screenshot(driver, "bases.png")
        note.find_element(By.CSS_SELECTOR, "button").click()
        wait(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, "#notes-list li.note"), what="the note gone")
        assert metis.notes(second) == []

        # A path outside the source roots: one clear sentence.
        field = driver.find_element(By.ID, "index-path")
        field.clear()
        field.send_keys("/etc" + Keys.ENTER)
        error = wait(driver, lambda d: d.find_element(By.ID, "page-error").text, what="the refusal")
        assert error.endswith(".") and "\n" not in error
        assert in_view(driver, "page-error"), "the refusal is printed below the viewport"
    finally:
        slow.close()
        metis.drop_base(second)


def in_view(driver: Any, element_id: str) -> bool:
    return driver.execute_script(
        "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
        "return r.top >= 0 && r.bottom <= window.innerHeight;", element_id)


# -- issue 25: the console's rough edges ------------------------------------------------------------


def test_a_result_says_its_title_once_and_its_scores_line_reads_as_text(driver, url, base):
    open_search(driver, url, f"#q=help+desk+passwords&base={base}&mode=keyword")
    item = next(r for r in driver.find_elements(By.CSS_SELECTOR, "#results .result")
                if r.find_element(By.CSS_SELECTOR, ".cite").text.startswith("help.html"))
    assert item.find_element(By.CSS_SELECTOR, ".title").text == "Help desk"
    headings = [h.text for h in item.find_elements(By.CSS_SELECTOR, ".headings")]
    assert not any(h.startswith("Help desk") for h in headings), headings
    size, colour, body = driver.execute_script(
        "const s = getComputedStyle(document.querySelector('#results .scores'));"
        "return [parseFloat(s.fontSize), s.color, getComputedStyle(document.body).color];")
    assert size >= 14 and colour == body, (size, colour, body)


def test_one_result_per_document_and_rerank_off_for_a_base_without_reranker(driver, url, base, metis, models,
                                                                            tmp_path):
    plain = f"t-console3-{uuid.uuid4().hex[:6]}"
    metis.create_base(plain, embedding_model=hash_embedder.MODEL, embedding_url=f"http://127.0.0.1:{models.port}",
                      embedding_dim=hash_embedder.DIM, model_timeout_s=2.0)
    try:
        metis.index(plain, write_corpus(tmp_path / "plain", {"a.txt": "The harbour crane lifts the boats."}))
        driver.get("about:blank")  # a new page: one that lists the new base
        open_search(driver, url, f"#q=router+modem+error&base={base}&per_document=1")
        want = [r.citation.location() for r in metis.search(base, "router modem error", per_document=True).results]
        assert cites(driver) == want and len({c.split(":")[0] for c in want}) == len(want)
        badges = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#results .result .passages")]
        assert len(badges) == len(want) and all(re.fullmatch(r"\d+ passages?", b) for b in badges), badges
        assert driver.find_element(By.ID, "summary").text.startswith(f"{len(want)} document")
        rerank = driver.find_element(By.ID, "rerank")
        assert rerank.is_enabled() and rerank.is_selected()
        ask(driver, "harbour crane", bases=[plain])  # the reranker is the other base's: none here
        assert not rerank.is_enabled() and not rerank.is_selected()
        assert driver.find_element(By.ID, "rerank-label").text == "no reranker"
        ask(driver, "harbour crane", bases=[base, plain])
        assert rerank.is_enabled() and driver.find_element(By.ID, "rerank-label").text == "rerank"
    finally:
        metis.drop_base(plain)


def test_compare_rows_show_their_snippet(driver, url, base, metis):
    open_search(driver, url, f"#q=modem+error+router&base={base}&compare=1")
    want = {p.chunk_id: p.citation.snippet for p in metis.compare(base, "modem error router").passages}

    def snippets(d: Any) -> dict[int, str]:  # read at once: the rows are redrawn
        return {int(k): v for k, v in d.execute_script(
            "return Object.fromEntries(Array.from(document.querySelectorAll('#compare-table tbody tr'))"
            ".map((r) => [r.dataset.chunk, (r.querySelector('.snippet') || {}).textContent || '']))").items()}

    wait(driver, lambda d: set(snippets(d)) == set(want), what="the rows")
    assert snippets(driver) == want and all(want.values())


def test_snippets_mark_only_the_words_that_weigh_in_the_base(driver, url, base, metis):
    """Issue 25: "the" and "for" are in most passages of the base: not marked; "reset" and "router" are (idf),
    in Search and in Compare, at the spans the API gives."""
    question = "how do I reset the router for staff"
    open_search(driver, url)
    ask(driver, question, bases=[base])
    want = next(r for r in metis.search(base, question).results if r.citation.document == "router.txt").citation
    assert [want.snippet[a:b] for a, b in want.marks] == ["Reset", "router"]
    result = next(e for e in driver.find_elements(By.CSS_SELECTOR, "#results .result")
                  if e.find_element(By.CSS_SELECTOR, ".cite").text.startswith("router.txt"))
    snippet = result.find_element(By.CSS_SELECTOR, ".snippet")
    assert snippet.text == want.snippet and " the " in snippet.text and " for " in snippet.text
    assert [m.text for m in snippet.find_elements(By.CSS_SELECTOR, "mark")] == ["Reset", "router"]

    open_search(driver, url, f"#q={question.replace(' ', '+')}&base={base}&compare=1")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#compare-table tbody tr"), what="the rows")
    marked = driver.execute_script(
        "return Array.from(document.querySelectorAll('#compare-table tbody tr .snippet mark')).map((m) => m.textContent)")
    assert marked and {m.lower() for m in marked} <= {"reset", "router", "staff"}, marked
    assert not {"the", "for", "how", "do"} & {m.lower() for m in marked}


def test_the_bases_page_offers_no_indexing_when_the_service_reads_no_folder(driver, metis, base):
    with service.running(service.create_app(metis, tokens=[TOKEN], source_roots=[])) as other:
        open_page(driver, f"{other}/console/bases")
        wait(driver, lambda d: cell(d, base, "status"), what="the base's row")
        assert not driver.find_elements(By.ID, "index-form")
        assert "METIS_SOURCE_ROOTS" in driver.find_element(By.ID, "indexing-off").text


def test_a_searchable_base_whose_indexing_never_finished_is_not_never_indexed(driver, url, metis, models, tmp_path,
                                                                             dsn):
    from cli_runner import run_cli
    from metis_pg import storage

    cut = f"t-console4-{uuid.uuid4().hex[:6]}"
    metis.create_base(cut, embedding_model=hash_embedder.MODEL, embedding_url=f"http://127.0.0.1:{models.port}",
                      embedding_dim=hash_embedder.DIM, model_timeout_s=2.0)
    try:
        metis.index(cut, write_corpus(tmp_path / "cut", {"a.txt": "The harbour crane lifts the boats."}))
        with metis.pool.connection() as conn:  # what a first run stopped by Ctrl-C leaves: chunks, no finished run
            conn.execute("UPDATE bases SET last_indexed_at = NULL WHERE base_id = %s",
                         (storage.get_base(conn, cut).base_id,))
        open_page(driver, f"{url}/console/bases")
        wait(driver, lambda d: cell(d, cut, "when"), what="the base's row")
        assert cell(driver, cut, "when") == "not finished yet"
        line = run_cli("status", cut, "--dsn", dsn).stdout
        assert line.rstrip().endswith("last indexed not finished yet"), line
    finally:
        metis.drop_base(cut)


def test_a_390_px_phone_screen_has_no_sideways_scroll(driver, url, base):
    driver.set_window_size(390, 844)
    try:
        open_search(driver, url, f"#q=modem+error&base={base}&compare=1")
        width = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], width
        screenshot(driver, "search-phone.png", max_height=1900)
        tick(driver, "#compare", on=False)
        ask(driver, "modem error")
        width = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], width
        open_page(driver, f"{url}/console/bases")
        wait(driver, lambda d: cell(d, base, "status"), what="the base's row")
        width = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], width
    finally:
        driver.set_window_size(1280, 900)
