"""The one HTTP error answer, built from the :mod:`metis_pg.errors` classes.

Every error of every route is ``{"error": {"code", "message"}}`` with the
status of its class (``http_status``): the exception handlers of the app, the
gate in front of it, request validation and unknown routes all answer through
:func:`error_response`.
"""

from __future__ import annotations

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from ..errors import MetisError, Unauthorized

__all__ = ["error_response", "validation_message"]


def error_response(exc: MetisError) -> JSONResponse:
    """Return the one JSON error answer: ``{"error": {"code", "message"}}`` with ``exc.http_status``."""
    headers = {"WWW-Authenticate": 'Bearer realm="metis"'} if isinstance(exc, Unauthorized) else None
    return JSONResponse(exc.to_dict(), status_code=exc.http_status, headers=headers)


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
