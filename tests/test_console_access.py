"""The console under access control (issue 21, part 2), in a real headless Chromium.

The service maps one token to the group ``eng`` and another to ``hr`` (``METIS_API_TOKENS``
entries ``TOKEN=group``). The base holds an open folder and a folder readable by ``hr`` only
(``metis.index(..., readers=["hr"])``): one document of it is embedded, the other's text the
embedding service refuses (so it is counted as a chunk without a vector, ``refused``). Signed in
with the ``eng`` token, nothing of the ``hr`` documents may show anywhere on the page — results in
every mode, one result per document, the whole passage, compare, and the counts of the Bases
page; signed in with the ``hr`` token, they show. What the page holds is read whole (its HTML,
collapsed parts included), not only what is visible.

The browser and its fixtures are tests/test_console.py's (Debian's chromium and chromium-driver).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

import metis_pg
from metis_pg import service

from corpus import write_corpus
from model_servers import FakeService, openai_embeddings
from test_console import cell, driver, shown, wait  # noqa: F401  (driver: the browser fixture)

ENG = "console-eng-" + "e" * 24
HR = "console-hr-" + "h" * 24
SECRET = "quetzalwages"
REFUSED = "REFUSEDBYMODEL"
DIM = 32

OPEN = {
    "handbook.md": "# Handbook\n\nVacation days and the payroll calendar for everyone. The office opens at nine.\n",
    "payroll-faq.md": "# Payroll FAQ\n\nWhen is payroll paid? Payroll runs on the last day of the month.\n",
}
HIDDEN = {
    "salaries.md": f"# Salaries {SECRET}\n\nThe payroll table {SECRET}: every salary, vacation days owed, the payroll"
                   " calendar.\n",
    "bonus-plan.md": f"# Bonus plan\n\nThe payroll bonus {SECRET} {REFUSED} for the board.\n",
}
#: What must never reach eng: the secret word, the hidden documents' titles and paths.
NEEDLES = (SECRET, "Salaries", "salaries", "Bonus plan", "bonus-plan")
QUESTION = f"payroll {SECRET} salary calendar"


def refusing_embedder(path: str, body: Any) -> tuple[int, Any]:
    """OpenAI-style hashed vectors, refusing (413) any batch holding a text with REFUSED."""
    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
    if any(REFUSED in t for t in texts):
        return 413, {"error": {"code": "TEXT_TOO_LONG", "message": "refused"}}
    return openai_embeddings(body, DIM)


@pytest.fixture(scope="module")
def base(metis: metis_pg.Metis, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("console-access")
    write_corpus(root / "open", OPEN)
    write_corpus(root / "hr", HIDDEN)
    embedder = FakeService(refusing_embedder)
    name = f"t-console-acl-{uuid.uuid4().hex[:6]}"
    metis.create_base(name, embedding_model="refusing-hash", embedding_url=embedder.url, embedding_dim=DIM)
    try:
        assert metis.index(name, root / "open").new == 2
        report = metis.index(name, root / "hr", readers=["hr"])
        assert report.new == 2 and report.chunks_refused == 1, report
        yield name
    finally:
        metis.drop_base(name)
        embedder.close()


@pytest.fixture(scope="module")
def url(metis: metis_pg.Metis, base: str) -> Iterator[str]:
    app = service.create_app(metis, tokens=[f"{ENG}=eng", f"{HR}=hr"])
    with service.running(app) as base_url:
        yield base_url


def sign_in(driver: Any, url: str, token: str, page: str = "/") -> None:  # noqa: F811
    """Open `page` in a fresh session of the tab and sign in with `token`."""
    driver.get(f"{url}/console/bases")
    driver.execute_script("sessionStorage.clear()")
    driver.get(f"{url}{page}")
    wait(driver, lambda d: shown(d, "sign-in"), what="the sign-in")
    driver.find_element(By.ID, "token").send_keys(token + Keys.ENTER)
    wait(driver, lambda d: shown(d, "main"), what="the page after signing in")


def search(driver: Any, url: str, base: str, **options: str) -> list[str]:  # noqa: F811
    """Run a search from its URL (as a shared link would); return the citations shown."""
    driver.get("about:blank")  # a new load, not a fragment change (the session's token stays)
    driver.get(f"{url}/#" + urlencode({"q": QUESTION, "base": base, "top_k": "20", **options}))
    wait(driver, lambda d: shown(d, "main"), what="the page")
    wait(driver, lambda d: d.find_element(By.ID, "answer").get_attribute("data-answered"), what="the answer")
    assert not driver.find_element(By.ID, "page-error").text
    for whole in driver.find_elements(By.CSS_SELECTOR, "#results details.whole summary"):
        whole.click()  # the whole passage open, as a reader would
    if options.get("compare"):
        return [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#compare-table tbody .cite")]
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#results .result .cite")]


def page_leaks(driver: Any) -> list[str]:  # noqa: F811
    """What of the hidden documents the page holds (its HTML and text; the question, the caller's
    own words, left out wherever the page repeats it)."""
    html = driver.execute_script("return document.documentElement.outerHTML + document.body.innerText")
    html = html.replace(QUESTION, "").replace(urlencode({"q": QUESTION})[2:], "")
    return [n for n in NEEDLES if n in html]


CASES = [{"mode": "hybrid"}, {"mode": "keyword"}, {"mode": "dense"}, {"per_document": "1"}, {"compare": "1"}]


def test_eng_never_sees_a_document_of_hr_in_search_compare_or_the_whole_passage(driver, url, base):  # noqa: F811
    sign_in(driver, url, ENG)
    for case in CASES:
        cites = search(driver, url, base, **case)
        assert cites and {c.split(":")[0] for c in cites} <= set(OPEN), (case, cites)
        assert not page_leaks(driver), (case, page_leaks(driver))


def test_hr_sees_it(driver, url, base):  # noqa: F811
    sign_in(driver, url, HR)
    for case in CASES:
        cites = search(driver, url, base, **case)
        assert "salaries.md" in {c.split(":")[0] for c in cites}, (case, cites)
    assert SECRET in driver.execute_script("return document.body.innerText")


def bases_row(driver: Any, url: str, token: str, base: str) -> dict[str, str | None]:  # noqa: F811
    sign_in(driver, url, token, "/console/bases")
    wait(driver, lambda d: cell(d, base, "documents"), what="the base's row")
    return {column: cell(driver, base, column) for column in ("documents", "chunks", "without")}


def test_the_bases_page_counts_only_what_the_token_may_read(driver, url, base, metis):  # noqa: F811
    everything = metis.base(base)
    assert everything.documents == 4 and everything.chunks_without_vector == 1

    eng = bases_row(driver, url, ENG, base)
    open_chunks = sum(d.chunks for d in metis.documents(base) if d.document in OPEN)
    assert eng == {"documents": "2", "chunks": str(open_chunks), "without": "0"}, eng
    assert not page_leaks(driver)
    # Nothing on the page counts the hidden documents: no "refused" reason, no total of 4.
    assert "refused" not in driver.execute_script("return document.body.innerText")

    hr = bases_row(driver, url, HR, base)
    assert hr["documents"] == "4" and hr["chunks"] == str(everything.chunks), hr
    assert re.fullmatch(r"1 \(1 refused by the model\)", hr["without"] or ""), hr


def test_http_counts_are_the_tokens_as_the_page_shows_them(url, base, metis):
    import httpx

    for token, documents in ((ENG, 2), (HR, 4)):
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
            listed = {b["name"]: b for b in client.get("/bases").json()["bases"]}[base]
            one = client.get(f"/bases/{base}").json()
            status = client.get(f"/bases/{base}/status").json()
        for answer in (listed, one, status):
            assert answer["documents"] == documents, (token, answer)
            assert answer["chunks_without_vector"] == (0 if token == ENG else 1), (token, answer)
            assert answer["without_vector_by_reason"].get("refused", 0) == (0 if token == ENG else 1), answer
