"""The console (issue 11): a Search page and a Bases page in the browser, served by ``metis serve``.

The pages are rendered on the server with Jinja2 (forms, labels, choices) and
filled by a little JavaScript of ours (``static/``) calling the JSON API of the
same process: no build step, nothing fetched from elsewhere.

Routes (no token needed: they hold no data; every call the pages make goes to
the API with ``Authorization: Bearer <token>``, the token kept in the browser's
``sessionStorage``, never in a URL or a cookie, so there is nothing for CSRF to ride on):

==========================  ==================================================
``GET /``                    the Search page (search, compare)
``GET /console/bases``       the Bases page (status, indexing jobs live, notes)
``GET /console/static/...``  the pages' script and style sheet
==========================  ==================================================

A search's URL keeps the search in its fragment (``/#q=...&base=...``): it
reproduces the search when opened, and the fragment never reaches the server,
so the question is in no access log (SPEC F20). Every response carries a strict
Content-Security-Policy (:data:`CSP`: scripts and styles from this origin only,
no inline script, no frames).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from ... import __version__
from ...api import MAX_QUESTION_CHARS, MAX_TOP_K
from ...readers import KINDS

__all__ = ["CSP", "OPEN_PREFIX", "PAGES", "mount_console"]

HERE = Path(__file__).parent
#: Paths below which everything is the console's own (served without a token).
OPEN_PREFIX = "/console/"
#: The console's pages (served without a token).
PAGES = frozenset({"/", "/console/bases"})

#: The Content-Security-Policy of every console response.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}

#: The search modes as the page names them (value, label).
MODES = (("hybrid", "hybrid (both)"), ("dense", "by meaning only"), ("keyword", "by words only"))


class _Static(StaticFiles):
    """Static files with the console's security headers."""

    def file_response(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        response = super().file_response(*args, **kwargs)
        response.headers.update(HEADERS)
        return response


def mount_console(app: FastAPI) -> None:
    """Add the console's pages and static files to `app` (the service of :func:`~metis_pg.service.create_app`).

    The gate (:class:`~metis_pg.service.gate.Gate`) lets :data:`PAGES` and paths under
    :data:`OPEN_PREFIX` through without a token.
    """
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    context = {
        "version": __version__,
        "modes": MODES,
        "kinds": sorted(set(KINDS.values())),
        "max_top_k": MAX_TOP_K,
        "max_question_chars": MAX_QUESTION_CHARS,
    }

    def page(request: Request, template: str, active: str) -> HTMLResponse:
        # Indexing from the console reads only under the service's source roots: none, no form to offer.
        indexing = bool(getattr(request.app.state, "source_roots", None))
        response = templates.TemplateResponse(request, template, {**context, "active": active, "indexing": indexing})
        response.headers.update(HEADERS)
        return response

    @app.get("/", include_in_schema=False, response_class=HTMLResponse)
    def search_page(request: Request) -> HTMLResponse:
        return page(request, "search.html", "search")

    @app.get("/console/bases", include_in_schema=False, response_class=HTMLResponse)
    def bases_page(request: Request) -> HTMLResponse:
        return page(request, "bases.html", "bases")

    app.mount("/console/static", _Static(directory=str(HERE / "static")), name="console-static")
