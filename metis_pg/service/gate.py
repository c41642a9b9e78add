"""The gate: ASGI middleware in front of the app that refuses before anything is parsed.

In order:

0. without tokens: the ``Host`` (421 ``HOST_NOT_ALLOWED``) and, for a request that
   changes something, the ``Origin`` (403 ``ORIGIN_NOT_ALLOWED``) must be loopback or
   ``METIS_ALLOWED_HOSTS`` (DNS rebinding, CSRF: :mod:`metis_pg.service.hosts`);
1. bearer token (401 ``UNAUTHORIZED``), from the headers;
2. body size (413 ``REQUEST_TOO_LARGE``): refused at once when its
   ``Content-Length`` is too large, else read up to the limit (chunked bodies
   too) and replayed to the app;
3. body time (408 ``REQUEST_TIMEOUT``, connection closed): the whole body must
   arrive within ``request_read_timeout_s`` of its first read, however it trickles;
4. overload (503 ``OVERLOADED``, ``Retry-After: 1``): ``POST /search`` and
   ``/compare`` beyond ``max_inflight_searches`` admitted at once are refused
   at once; of those admitted, ``search_workers`` are computed at the same moment
   and the others wait their turn in order, at most ``search_queue_s`` seconds: one
   that would wait longer is answered 503 ``OVERLOADED`` then (queue deadline), so
   an answer given never waited more than that for its turn.

Everything is decided before the app parses anything. The headers' own
deadline is kept by the HTTP protocol (:mod:`metis_pg.service.server`), as the
gate only runs once they are complete.

The Eos model server (:mod:`metis_pg.eos_server`) is behind the same gate with its own
:class:`Doors` (:data:`EOS_DOORS`: no bounded path, its ``BODY_TOO_LARGE`` code, and the
client-gone signal its routes check between texts).
"""

from __future__ import annotations

import asyncio
import hmac
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import (
    BodyTooLarge,
    HostNotAllowed,
    InvalidInput,
    OriginNotAllowed,
    Overloaded,
    RequestTimeout,
    RequestTooLarge,
    Unauthorized,
)
from .errors import error_response
from .hosts import STATE_CHANGING_METHODS, host_allowed, origin_allowed
from . import swagger
from .settings import Limits

__all__ = [
    "Gate", "Doors", "SERVICE_DOORS", "EOS_DOORS", "CLIENT_GONE", "OPEN_PATHS", "OPEN_PREFIXES", "BOUNDED_PATHS",
    "bearer_authorized", "header",
]

#: Paths that answer without a token: liveness and the API's own description.
OPEN_PATHS = frozenset({"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/"}) | swagger.ASSET_PATHS
#: Path prefixes that answer without a token: the console's pages and files hold no data
#: (:mod:`metis_pg.service.console`; its ``/`` is in OPEN_PATHS). Its calls to the API send the token.
OPEN_PREFIXES = ("/console/",)
#: Paths (POST) whose requests count against ``max_inflight_searches``.
BOUNDED_PATHS = frozenset({"/search", "/compare"})
#: Key of ``scope["state"]`` (``request.state.metis_principals``) holding the groups of the request's
#: token (issue 21; :func:`metis_pg.service.app.principals_of`). Set by the gate alone, when tokens are on.
PRINCIPALS = "metis_principals"
#: Scope key of the :class:`threading.Event` set once a request's client has gone (with ``Doors.watch_client``).
CLIENT_GONE = "metis_eos.client_gone"


@dataclass(frozen=True)
class Doors:
    """What a server's gate lets through and how it refuses.

    Attributes:
        open_paths, open_prefixes: answered without a token.
        bounded_paths: POST paths counted against ``max_inflight_searches``.
        too_large: the error of a body over ``max_body_bytes``.
        watch_client: set ``scope[CLIENT_GONE]`` (a :class:`threading.Event`) once the client has
            gone while the app works, so that long work can stop.
    """

    open_paths: frozenset[str]
    open_prefixes: tuple[str, ...] = ()
    bounded_paths: frozenset[str] = frozenset()
    too_large: type[RequestTooLarge] = RequestTooLarge
    watch_client: bool = False


#: The HTTP service's (``metis serve``).
SERVICE_DOORS = Doors(OPEN_PATHS, OPEN_PREFIXES, BOUNDED_PATHS)
#: The Eos model server's (``metis eos serve``).
EOS_DOORS = Doors(frozenset({"/healthz"}), too_large=BodyTooLarge, watch_client=True)


class Gate:
    """ASGI middleware: token (401), body size (413), body time (408), overload (503); see the module docstring.

    Attributes:
        inflight: bounded requests (:data:`BOUNDED_PATHS`) being computed now.
    """

    def __init__(self, app: ASGIApp, *, tokens: Sequence[str], limits: Limits, doors: Doors = SERVICE_DOORS,
                 allowed_hosts: frozenset[str] = frozenset(),
                 token_groups: Mapping[str, tuple[str, ...]] | None = None) -> None:
        self.app = app
        self.tokens = tuple(t.encode("utf-8") for t in tokens)
        # The groups of each token, in the order of `tokens` (issue 21): the principals a request
        # made with it reads on behalf of, set in scope["state"][PRINCIPALS] by the gate only.
        self.groups = tuple((token_groups or {}).get(t, ()) for t in tokens)
        self.limits = limits
        self.doors = doors
        self.allowed_hosts = allowed_hosts
        self.max_body_bytes = limits.max_body_bytes
        # Only touched on the event loop: no lock.
        self.inflight = 0  # admitted: computing or waiting their turn
        self.running = 0  # computing (at most limits.search_workers)
        self.waiting: deque[asyncio.Future[bool]] = deque()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if not self.tokens:
            refused = self._foreign(scope)
            if refused is not None:
                await error_response(refused)(scope, receive, send)
                return
        is_open = path in self.doors.open_paths or path.startswith(self.doors.open_prefixes)
        matched = bearer_token(scope, self.tokens) if self.tokens else None
        if self.tokens and not is_open and matched is None:
            await error_response(Unauthorized("a valid bearer token is required: Authorization: Bearer <token>"))(
                scope, receive, send
            )
            return
        if self.tokens:
            # Whatever the request says: its principals are its token's groups (none on an open path).
            scope.setdefault("state", {})[PRINCIPALS] = self.groups[matched] if matched is not None else ()
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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.request_read_timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                late = RequestTimeout(
                    f"the request body did not arrive within {self.limits.request_read_timeout_s:g} s"
                )
                await error_response(late)(scope, receive, send)
                return
            if message["type"] == "http.disconnect":
                return
            body.extend(message.get("body", b""))
            if len(body) > self.max_body_bytes:
                await error_response(self._too_large(None))(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        if self.doors.watch_client:
            await self._watching_client(scope, bytes(body), receive, send)
            return
        replay = _replay(bytes(body), receive)
        if scope["method"] != "POST" or scope["path"] not in self.doors.bounded_paths:
            await self.app(scope, replay, send)
            return
        if self.inflight >= self.limits.max_inflight_searches:
            busy = Overloaded(
                f"the service is computing {self.inflight} searches, its limit (METIS_MAX_INFLIGHT_SEARCHES): "
                "retry in a second"
            )
            await error_response(busy)(scope, receive, send)
            return
        self.inflight += 1
        try:
            if not await self._turn(loop.time() + self.limits.search_queue_s):
                late = Overloaded(
                    f"the search waited {self.limits.search_queue_s:g} s for its turn (METIS_SEARCH_QUEUE_S) "
                    f"behind {self.running} searches being computed: retry in a second"
                )
                await error_response(late)(scope, receive, send)
                return
            try:
                await self.app(scope, replay, send)
            finally:
                self._next()
        finally:
            self.inflight -= 1

    async def _turn(self, deadline: float) -> bool:
        """Wait for one of the ``search_workers`` turns until `deadline` (loop time); False when too late."""
        if self.running < self.limits.search_workers and not self.waiting:
            self.running += 1
            return True
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[bool] = loop.create_future()
        self.waiting.append(turn)
        timer = loop.call_at(deadline, lambda: turn.done() or turn.set_result(False))
        try:
            given = await turn
        except asyncio.CancelledError:  # the client went away
            if turn.done() and not turn.cancelled() and turn.result():
                self._next()  # the turn handed to it goes to the next one
            raise
        finally:
            timer.cancel()
        if not given and turn in self.waiting:  # _next drops the turns that are too late as it meets them
            self.waiting.remove(turn)
        return given

    def _next(self) -> None:
        """A search is done: hand its turn to the oldest one still waiting, or free it."""
        while self.waiting:
            turn = self.waiting.popleft()
            if not turn.done():
                turn.set_result(True)
                return
        self.running -= 1

    def _foreign(self, scope: Scope) -> HostNotAllowed | OriginNotAllowed | None:
        """Without tokens: the refusal of a request whose Host or (changing something) Origin is foreign."""
        host = header(scope, b"host")
        if not host_allowed(host, self.allowed_hosts):
            return HostNotAllowed(
                f"this service answers only to loopback host names and METIS_ALLOWED_HOSTS, not Host {host!r} "
                "(without tokens; a page reaching it through DNS rebinding is refused)"
            )
        origin = header(scope, b"origin")
        if scope["method"] in STATE_CHANGING_METHODS and not origin_allowed(origin, self.allowed_hosts):
            return OriginNotAllowed(
                f"a {scope['method']} from a page of {origin!r} is refused: without tokens only pages of loopback "
                "hosts and METIS_ALLOWED_HOSTS may change anything (cross-site request)"
            )
        return None

    def _too_large(self, length: int | None) -> RequestTooLarge:
        size = f"{length} bytes" if length is not None else "more"
        return self.doors.too_large(f"the request body is {size}; the limit is {self.max_body_bytes} bytes")

    async def _watching_client(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
        """Run the app with `body` while a task waits for the client's ``http.disconnect`` and sets
        ``scope[CLIENT_GONE]``, which the routes check between texts."""
        gone = threading.Event()
        disconnected = asyncio.Event()
        scope[CLIENT_GONE] = gone

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()
            disconnected.set()

        async def after_body() -> Message:  # the watcher reads the real receive meanwhile
            await disconnected.wait()
            return {"type": "http.disconnect"}

        watcher = asyncio.ensure_future(watch())
        try:
            await self.app(scope, _replay(body, after_body), send)
        finally:
            watcher.cancel()

    def _authorized(self, scope: Scope) -> bool:
        return bearer_authorized(scope, self.tokens)


def bearer_token(scope: Scope, tokens: Sequence[bytes]) -> int | None:
    """The index in `tokens` (UTF-8 bytes) of the request's ``Authorization: Bearer <token>``, or None.

    Compared with every token (constant time each), so timing says nothing of which matched.
    """
    value = header(scope, b"authorization") or ""
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    given = token.strip().encode("utf-8", "surrogateescape")
    matches = [hmac.compare_digest(given, t) for t in tokens]
    return matches.index(True) if any(matches) else None


def bearer_authorized(scope: Scope, tokens: Sequence[bytes]) -> bool:
    """Whether the request's ``Authorization: Bearer <token>`` is one of `tokens` (UTF-8 bytes);
    the service's gate and the Eos server's both ask this (:func:`bearer_token`)."""
    return bearer_token(scope, tokens) is not None


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
