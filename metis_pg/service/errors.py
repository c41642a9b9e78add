"""The one HTTP error answer, built from the :mod:`metis_pg.errors` classes.

Every error of every route is ``{"error": {"code", "message"}}`` with the
status of its class (``http_status``): the exception handlers of the app, the
gate in front of it, request validation and unknown routes all answer through
:func:`error_response`. A 503 (database or model unavailable, overload) carries
``Retry-After`` (seconds): :data:`RETRY_AFTER_S`, or the error's own
``retry_after_s`` when it has one.
"""

from __future__ import annotations

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from ..errors import MetisError, Overloaded, RequestTimeout, Unauthorized

__all__ = ["error_response", "error_headers", "validation_message", "RETRY_AFTER_S"]

#: Seconds a client is asked to wait (``Retry-After``) after a 503, by error class; the first match wins.
RETRY_AFTER_S: tuple[tuple[type[MetisError], int], ...] = ((Overloaded, 1), (MetisError, 5))


def error_headers(exc: MetisError) -> dict[str, str]:
    """Return the headers an error answer carries besides its body: ``Retry-After``, ``WWW-Authenticate``, ..."""
    headers: dict[str, str] = {}
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = 'Bearer realm="metis"'
    if exc.http_status == 503:
        seconds = getattr(exc, "retry_after_s", None)
        if seconds is None:
            seconds = next(s for cls, s in RETRY_AFTER_S if isinstance(exc, cls))
        headers["Retry-After"] = str(max(1, round(seconds)))
    if isinstance(exc, RequestTimeout):
        headers["Connection"] = "close"  # the rest of the request may still come: never read it as the next one
    return headers


def error_response(exc: MetisError) -> JSONResponse:
    """Return the one JSON error answer: ``{"error": {"code", "message"}}`` with ``exc.http_status``."""
    return JSONResponse(exc.to_dict(), status_code=exc.http_status, headers=error_headers(exc) or None)


def validation_message(exc: RequestValidationError) -> str:
    """Return one sentence saying what is wrong with a request that failed validation."""
    errors = exc.errors()
    if not errors:
        return "invalid request"
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "path", "query"))
    message = str(first.get("msg", "invalid value"))
    if first.get("type") == "json_invalid":
        return "the body is not valid JSON"
    return f"{where}: {message}" if where else message
