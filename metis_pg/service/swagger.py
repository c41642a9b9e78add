"""Swagger UI at ``/docs``, its assets served by the service itself (nothing fetched from a CDN).

FastAPI's default ``/docs`` page loads Swagger UI from a CDN: blank on a machine offline.
Here the page names ``/docs/swagger-ui-bundle.js``, ``/docs/swagger-ui.css`` and
``/docs/favicon.png``, read from the PyPI package ``fastapi-offline`` (Swagger UI 5, which
renders OpenAPI 3.1; Apache 2.0), answered without a token like ``/docs`` itself
(:data:`~metis_pg.service.gate.OPEN_PATHS`).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse

__all__ = ["ASSETS", "ASSET_PATHS", "install"]

#: URL path -> (file name in the package's static folder, media type).
ASSETS = {
    "/docs/swagger-ui-bundle.js": ("swagger-ui-bundle.js", "text/javascript"),
    "/docs/swagger-ui.css": ("swagger-ui.css", "text/css"),
    "/docs/favicon.png": ("favicon.png", "image/png"),
}
ASSET_PATHS = frozenset(ASSETS)


def _static() -> Path:
    return Path(str(resources.files("fastapi_offline"))) / "static"


def install(app: FastAPI, *, title: str, openapi_url: str = "/openapi.json") -> None:
    """Add ``/docs``, ``/docs/oauth2-redirect`` and the assets to `app` (created with ``docs_url=None``)."""
    static = _static()

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url, title=f"{title} — API", oauth2_redirect_url="/docs/oauth2-redirect",
            swagger_js_url="/docs/swagger-ui-bundle.js", swagger_css_url="/docs/swagger-ui.css",
            swagger_favicon_url="/docs/favicon.png",
            # Swagger UI would send the schema's URL to validator.swagger.io for a badge (a request to
            # the internet, broken offline) whenever the page is opened by a host name.
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    for path, (name, media_type) in ASSETS.items():
        def asset(file: Path = static / name, media_type: str = media_type) -> FileResponse:
            return FileResponse(file, media_type=media_type, headers={"Cache-Control": "public, max-age=86400"})

        app.add_api_route(path, asset, methods=["GET"], include_in_schema=False)
