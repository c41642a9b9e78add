"""The one HTTP error answer, built from the :mod:`metis_pg.errors` classes.

Every error of every route is ``{"error": {"code", "message"}}`` with the
status of its class (``http_status``): the exception handlers of the app, the
gate in front of it, request validation and unknown routes all answer through
:func:`error_response`, in the HTTP service and in the Eos model server
(:mod:`metis_pg.eos_server`, whose validation errors are 422 with pydantic's ``details``). A 503 (database or model unavailable, overload) carries
``Retry-After`` (seconds): :data:`RETRY_AFTER_S`, or the error's own
``retry_after_s`` when it has one.
"""

from __future__ import annotations

import re

from typing import Any

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


def error_response(exc: MetisError, *, status_code: int | None = None, details: Any = None) -> JSONResponse:
    """Return the one JSON error answer: ``{"error": {"code", "message"}}`` with ``exc.http_status``.

    Args:
        status_code: another status than the class's (the Eos server's 422 for a body that fails validation).
        details: JSON put under ``error.details`` (pydantic's errors), None for none.
    """
    body = exc.to_dict()
    if details is not None:
        body["error"]["details"] = details
    return JSONResponse(body, status_code=status_code or exc.http_status, headers=error_headers(exc) or None)


def validation_message(exc: RequestValidationError) -> str:
    """Return one plain sentence for a request that failed validation: ``<field path>: <what is wrong>``.

    The field path is the JSON path the caller wrote (``filters.kinds[0]``), never
    pydantic's internals (union branches such as ``function-after[...]``); of a
    union's branches the one the value was closest to is reported.
    """
    errors = [e for e in exc.errors() if isinstance(e, dict)]
    if not errors:
        return "invalid request"
    if any(e.get("type") == "json_invalid" for e in errors):
        return "the body is not valid JSON"
    # Group by top-level field: the branches of a union (a string or a list) land in one group.
    by_field: dict[str, list[tuple[str, dict]]] = {}
    for error in errors:
        path = _field_path(error)
        by_field.setdefault(re.split(r"[.\[]", path, maxsplit=1)[0], []).append((path, error))
    group = next(iter(by_field.values()))
    wrong_value = [(p, e) for p, e in group if not _is_type_error(e)]
    if wrong_value:
        path, error = wrong_value[0]
        sentence = _sentence(error)
    else:
        path = min((p for p, _ in group), key=len)
        kinds = list(dict.fromkeys(_TYPE_WORDS[str(e.get("type"))] for p, e in group if p == path))
        sentence = "must be " + " or ".join(kinds)
    if not path:
        return f"the body {sentence}"
    more = len(by_field) - 1
    return f"{path}: {sentence}" + (f" (and {more} more field{'s' if more > 1 else ''} wrong)" if more else "")


#: Words for "must be ..." by pydantic error type.
_TYPE_WORDS = {
    "string_type": "a string", "string_unicode": "a string",
    "int_type": "a whole number", "int_parsing": "a whole number", "int_from_float": "a whole number",
    "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "list_type": "a list", "dict_type": "a JSON object", "model_type": "a JSON object",
    "model_attributes_type": "a JSON object", "none_required": "null",
}
_LOCATIONS = ("body", "path", "query", "header")


def _is_type_error(error: dict) -> bool:
    return str(error.get("type")) in _TYPE_WORDS


def _field_names() -> frozenset[str]:
    from pydantic import BaseModel

    from . import schemas

    names = {"name", "note_id", "job_id", "holding_only"}  # path and query parameters
    for value in vars(schemas).values():
        if isinstance(value, type) and issubclass(value, BaseModel):
            names.update(value.model_fields)
    return frozenset(names)


def _field_path(error: dict) -> str:
    """The caller's JSON path of an error (``filters.kinds[0]``): union branch tags dropped."""
    fields = _FIELDS or _load_fields()
    loc = list(error.get("loc", ()))
    if loc and loc[0] in _LOCATIONS:
        loc = loc[1:]
    path = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in fields or (error.get("type") == "extra_forbidden" and i == len(loc) - 1):
            text = str(part) if len(str(part)) <= 60 else str(part)[:57] + "..."
            path += f".{text}" if path else text
    return path


_FIELDS: frozenset[str] = frozenset()


def _load_fields() -> frozenset[str]:
    global _FIELDS
    _FIELDS = _field_names()
    return _FIELDS


def _sentence(error: dict) -> str:
    """What is wrong, in words, from a pydantic error's type and context."""
    kind = str(error.get("type"))
    ctx = error.get("ctx") or {}
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a field of this request (misspelt?)"
    if kind == "string_too_short":
        n = ctx.get("min_length", 1)
        return "must not be empty" if n == 1 else f"must have at least {n} characters"
    if kind == "string_too_long":
        return f"must have at most {ctx.get('max_length')} characters"
    if kind == "too_short":
        n = ctx.get("min_length")
        return f"must hold at least {n} item{'s' if n != 1 else ''}"
    if kind == "too_long":
        return f"must hold at most {ctx.get('max_length')} items"
    bounds = {"greater_than_equal": ("at least", "ge"), "less_than_equal": ("at most", "le"),
              "greater_than": ("more than", "gt"), "less_than": ("less than", "lt")}
    if kind in bounds:
        words, key = bounds[kind]
        return f"must be {words} {ctx.get(key)}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}"
    if kind in _TYPE_WORDS:
        return f"must be {_TYPE_WORDS[kind]}"
    if kind in ("value_error", "assertion_error") and ctx.get("error") is not None:
        return str(ctx["error"])
    message = str(error.get("msg") or "is not valid")
    return message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
