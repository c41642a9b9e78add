"""The gate: ASGI middleware in front of the app that refuses before anything is parsed.

In order: bearer token (401 ``UNAUTHORIZED``), then body size (413
``REQUEST_TOO_LARGE``). Both are decided before the app reads or parses
anything: a token is checked from the headers; a body is refused at once when
its ``Content-Length`` is too large, else read up to the limit (chunked bodies
too) and replayed to the app.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import InvalidInput, RequestTooLarge, Unauthorized
from .errors import error_response

__all__ = ["Gate", "OPEN_PATHS"]

#: Paths that answer without a token: liveness and the API's own description.
OPEN_PATHS = frozenset({"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect"})


class Gate:
    """ASGI middleware: bearer token (401), then body size (413); see the module docstring."""

    def __init__(self, app: ASGIApp, *, tokens: Sequence[str], max_body_bytes: int) -> None:
        self.app = app
        self.tokens = tuple(t.encode("utf-8") for t in tokens)
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.tokens and scope["path"] not in OPEN_PATHS and not self._authorized(scope):
            await error_response(Unauthorized("a valid bearer token is required: Authorization: Bearer <token>"))(
                scope, receive, send
            )
            return
        length = header(scope, b"content-length")
        if length is not None:
            if not length.isdigit():
                await error_response(InvalidInput("Content-Length is not a number"))(scope, receive, send)
                return
            if int(length) > self.max_body_bytes:
                await error_response(self._too_large(int(length)))(scope, receive, send)
                return
        if scope["method"] in ("GET", "HEAD", "OPTIONS") and length is None:
            await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body.extend(message.get("body", b""))
            if len(body) > self.max_body_bytes:
                await error_response(self._too_large(None))(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(bytes(body), receive), send)

    def _too_large(self, length: int | None) -> RequestTooLarge:
        size = f"{length} bytes" if length is not None else "more"
        return RequestTooLarge(f"the request body is {size}; the limit is {self.max_body_bytes} bytes")

    def _authorized(self, scope: Scope) -> bool:
        value = header(scope, b"authorization") or ""
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return False
        given = token.strip().encode("utf-8", "surrogateescape")
        # Compare with every token (constant time each), so timing says nothing of which matched.
        matches = [hmac.compare_digest(given, t) for t in self.tokens]
        return any(matches)


def header(scope: Scope, name: bytes) -> str | None:
    """Return the value of header `name` (lower case) of an HTTP scope, or None."""
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1").strip()
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
