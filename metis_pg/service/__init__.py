"""The HTTP service (SPEC F19): ``metis serve``, a FastAPI app over :class:`~metis_pg.api.Metis`.

Where each concern lives:

===============  ===========================================================================
``app``          :func:`create_app`: the routes, the exception handlers (docs/http.md lists them)
``schemas``      request bodies and documented answers (pydantic models)
``gate``         ASGI middleware in front of the app: token (401), body size (413), body time
                 (408), in-flight searches (503 ``OVERLOADED``)
``errors``       :func:`error_response`: the one ``{"error": {"code", "message"}}`` answer,
                 ``Retry-After`` on 503, validation errors in plain words
``jobs``         indexing jobs started through HTTP, run one at a time on a worker thread
``sources``      which paths indexing through HTTP may read (``METIS_SOURCE_ROOTS``), and
                 showing them relative to their root
``model_urls``   which model URLs a base created over HTTP may name (``METIS_MODEL_URL_ALLOW_HOSTS``)
``settings``     every setting of the service (:data:`SETTINGS`), :class:`Limits`, the bind check
``server``       :func:`serve` (uvicorn, ``metis serve``, logging) and :func:`running` (tests,
                 benchmarks); the headers deadline and the connection cap
===============  ===========================================================================

Errors are ``{"error": {"code", "message"}}`` with the status of the
:mod:`metis_pg.errors` class, built by one function (:func:`error_response`)
for every path: the exception handlers, request validation (400
``INVALID_REQUEST``), unknown routes (404 ``NOT_FOUND``), and the gate that
answers 401 ``UNAUTHORIZED`` and 413 ``REQUEST_TOO_LARGE`` before a body is
read or parsed.
"""

from __future__ import annotations

from .app import create_app
from .errors import error_response
from .jobs import Job, Jobs
from .server import running, serve
from .settings import (
    DEFAULT_MAX_BODY_BYTES,
    MIN_TOKEN_CHARS,
    SETTINGS,
    check_bind,
    is_loopback,
    parse_source_roots,
    parse_tokens,
)
from .sources import resolve_source_path

__all__ = [
    "create_app",
    "serve",
    "running",
    "error_response",
    "parse_tokens",
    "parse_source_roots",
    "check_bind",
    "is_loopback",
    "resolve_source_path",
    "Job",
    "Jobs",
    "DEFAULT_MAX_BODY_BYTES",
    "MIN_TOKEN_CHARS",
    "SETTINGS",
]
