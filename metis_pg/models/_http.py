"""The one seam where httpx errors become metis errors (``models/``).

Every remote model call goes through :func:`post_json`. Whatever goes wrong on
the wire — no answer in time, connection refused, HTTP >= 400, a body that is
not JSON — leaves as the error class the caller names
(:class:`~metis_pg.errors.EmbeddingModelUnavailable` or
:class:`~metis_pg.errors.RerankerUnavailable`), ``from`` the httpx exception,
with a one-line message that starts with the caller's label::

    embedding model 'bge-m3' at http://gpu1:8080/embed: no answer within 10.0 s
    embedding model 'bge-m3' at http://gpu1:8080/embed: answered HTTP 500 (text/html, 1893 bytes)

A message never quotes what the server sent (a model URL given over HTTP could
point at any service inside the network): status, content type and length only.

Checking what the JSON *means* (counts, shapes, NaN) is the callers' job; they
raise the same classes through :func:`fail`.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

import httpx

from ..config import Settings
from ..errors import ConfigError, ModelUnavailable
from ._breaker import CircuitBreaker
from ._protocol import fail

__all__ = [
    "HttpModelClient",
    "post_json",
    "api_key_headers",
    "fail",
    "translate_httpx_errors",
    "endpoint_url",
    "is_transient",
    "timed_out",
    "RemoteStatus",
    "MAX_RESPONSE_BYTES",
]

#: A model answer larger than this is refused (256 inputs x 4096 floats as JSON is ~20 MB).
MAX_RESPONSE_BYTES = 200_000_000


def endpoint_url(base_url: str, path: str) -> str:
    """Join a service's base URL and an endpoint path such as ``/v1/embeddings``.

    A base URL that already ends in ``/v1`` (the OpenAI clients' convention,
    ``https://api.openai.com/v1``) is accepted: ``/v1`` is not doubled.

    Raises:
        ConfigError: the base URL is not ``http://`` or ``https://``.
    """
    if not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"a model service URL must start with http:// or https://, not {base_url!r}")
    base = base_url.rstrip("/")
    if path.startswith("/v1/") and base.endswith("/v1"):
        base = base[: -len("/v1")]
    return base + path


def api_key_headers(env_name: str | None) -> dict[str, str]:
    """Return ``{"Authorization": "Bearer <key>"}`` when ``$env_name`` is set and not empty, else ``{}``.

    The key is read at each call, never stored (SPEC: keys live in the environment).
    """
    if not env_name:
        return {}
    key = os.environ.get(env_name)
    if not key:
        return {}
    return {"Authorization": f"Bearer {key}"}


def _seconds(timeout_s: float) -> str:
    return f"{float(timeout_s)} s"


class RemoteStatus(Exception):
    """The ``__cause__`` of an error raised for an HTTP status >= 400: that status, for :func:`is_transient`."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


_MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,63}")


def _described(response: httpx.Response, size: int) -> str:
    """``"text/html, 17 bytes"``: what a reply was, never what it said (no SSRF read-back)."""
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if not kind:
        kind = "no content type"
    elif not _MEDIA_TYPE.fullmatch(kind):
        kind = "a malformed content type"  # a header is the server's text too: only a media type is shown
    return f"{kind}, {size} bytes"


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` (raised by :func:`post_json`) may pass if the same request is sent again.

    Transient: no answer in time, connection refused or dropped, any other
    transport error, HTTP 5xx, 408 and 429. Not transient: other 4xx, a body that
    is not JSON or does not mean what it should, a skipped call (circuit open).
    """
    cause = exc.__cause__
    if isinstance(cause, RemoteStatus):
        return cause.status >= 500 or cause.status in (408, 429)
    return isinstance(cause, httpx.TransportError)


def timed_out(exc: BaseException) -> bool:
    """True when ``exc`` (raised by :func:`post_json`) means the model gave no answer in time."""
    return isinstance(exc.__cause__, httpx.TimeoutException)


@contextmanager
def translate_httpx_errors(error: type[ModelUnavailable], label: str, timeout_s: float) -> Iterator[None]:
    """Turn any httpx exception raised inside the block into ``error``.

    Args:
        error: the metis class to raise.
        label: who was called, e.g. ``"reranker 'x' at http://h/rerank"``.
        timeout_s: the timeout the caller set, for the message.
    """
    try:
        yield
    except httpx.TimeoutException as exc:
        raise error(f"{label}: no answer within {_seconds(timeout_s)}") from exc
    except httpx.ConnectError as exc:
        raise error(f"{label}: could not connect ({exc or type(exc).__name__})") from exc
    except httpx.RemoteProtocolError as exc:
        # h11's message may quote the bytes the server sent: never echoed (SSRF read-back).
        raise error(f"{label}: closed the connection without a valid HTTP answer") from exc
    except httpx.HTTPError as exc:
        raise error(f"{label}: request failed ({type(exc).__name__})") from exc


def post_json(
    client: httpx.Client,
    url: str,
    payload: Any,
    *,
    error: type[ModelUnavailable],
    label: str,
    timeout_s: float,
    deadline: float | None = None,
    headers: dict[str, str] | None = None,
) -> Any:
    """POST ``payload`` as JSON to ``url``; return the decoded JSON answer.

    The call waits at most ``timeout_s`` seconds: httpx's connect, write, read
    and pool timeouts are set to what is left, and the body is read with a
    wall-clock check, so a server that trickles bytes is cut off too (a single
    read can overrun the deadline by at most the time left when it started).

    Args:
        client: the caller's httpx client (its transport, pool and settings).
        url: full endpoint URL.
        payload: JSON-able request body.
        error: class raised for every failure.
        label: start of every message (names the model and the URL).
        timeout_s: seconds this call may take; also the figure in the message.
        deadline: optional ``time.monotonic()`` instant shared by several calls
            (a reranker split in batches); the call ends by then at the latest.
        headers: extra headers (an API key).

    Raises:
        ModelUnavailable: the ``error`` class — no answer in time, connection
            refused or dropped, HTTP >= 400, a body larger than
            :data:`MAX_RESPONSE_BYTES`, or a body that is not JSON.
    """
    started = time.monotonic()
    end = started + timeout_s if deadline is None else min(deadline, started + timeout_s)
    left = end - started
    if left <= 0:
        fail(error, label, f"no answer within {_seconds(timeout_s)}")
    with translate_httpx_errors(error, label, timeout_s):
        with client.stream("POST", url, json=payload, headers=headers, timeout=httpx.Timeout(left)) as response:
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    fail(error, label, f"answered more than {MAX_RESPONSE_BYTES} bytes")
                if time.monotonic() > end:
                    raise httpx.ReadTimeout("deadline passed while reading the answer")
            body = b"".join(chunks)
            status = response.status_code
            described = _described(response, size)
    if status >= 400:
        raise error(f"{label}: answered HTTP {status} ({described})") from RemoteStatus(status)
    try:
        return json.loads(body)
    except ValueError as exc:
        raise error(f"{label}: answered something that is not JSON ({described})") from exc


class HttpModelClient:
    """A lazily opened, thread-safe httpx client shared by one model client's calls, with its breaker.

    Subclasses set ``self.url``, ``self.label`` and the class attribute
    ``error`` before calling ``super().__init__``; ``close()`` (or ``with``)
    closes the connection pool, and the next call opens a new one.

    ``self.breaker`` (a :class:`~metis_pg.models._breaker.CircuitBreaker`,
    one per client instance) skips the model after
    ``settings.model_breaker_failures`` failures in a row, for
    ``settings.model_breaker_cooldown_s`` seconds; subclasses make every
    request through ``self.breaker.call``.

    Args:
        transport: an httpx transport (tests use ``httpx.MockTransport``).
        settings: process settings (the breaker's thresholds).
    """

    error: type[ModelUnavailable] = ModelUnavailable
    label: str

    def __init__(self, transport: httpx.BaseTransport | None = None, *, settings: Settings) -> None:
        self.settings = settings
        self._transport = transport
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()
        self.breaker = CircuitBreaker(
            self.error,
            self.label,
            failures=self.settings.model_breaker_failures,
            cooldown_s=self.settings.model_breaker_cooldown_s,
        )

    def _http(self) -> httpx.Client:
        with self._client_lock:
            if self._client is None:
                self._client = httpx.Client(transport=self._transport)
            return self._client

    def close(self) -> None:
        """Close the connection pool (a new one opens if the client is used again)."""
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
