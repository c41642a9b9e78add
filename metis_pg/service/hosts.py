"""Which ``Host`` and ``Origin`` the token-less service answers (DNS rebinding, CSRF).

Without tokens the service binds loopback only, but a page of any site can still
reach it through the browser: by DNS rebinding (``evil.example`` resolving to
127.0.0.1, so the browser sends ``Host: evil.example:8080``) or by a form or
``fetch`` posted from another origin. So, without tokens:

- a request whose ``Host`` is neither a loopback name (``localhost``,
  127.0.0.0/8, ``[::1]``) nor one of ``METIS_ALLOWED_HOSTS`` is answered
  421 ``HOST_NOT_ALLOWED``, whatever its route;
- a ``POST``, ``PUT``, ``PATCH`` or ``DELETE`` carrying an ``Origin`` whose host
  is not one of those is answered 403 ``ORIGIN_NOT_ALLOWED`` (``Origin: null``,
  sent by sandboxed pages and some redirects, is refused too). A request
  without ``Origin`` (curl, a program) is not a browser's cross-site request.

With tokens neither is checked: a browser never attaches a bearer token by itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from .settings import is_loopback

__all__ = ["parse_allowed_hosts", "host_allowed", "origin_allowed", "STATE_CHANGING_METHODS"]

#: Methods whose cross-origin requests are refused (the others only read).
STATE_CHANGING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def parse_allowed_hosts(value: str | Sequence[str] | None) -> frozenset[str]:
    """Return the ``host`` / ``host:port`` items of `value` (comma-separated or a list), in lower case."""
    if value is None:
        return frozenset()
    items = value.split(",") if isinstance(value, str) else list(value)
    return frozenset(i.strip().lower().rstrip(".") for i in items if i and i.strip())


def _split(hostport: str) -> tuple[str, str]:
    """``("[::1]", "8080")`` of ``[::1]:8080``; ``("example.com", "")`` of ``example.com``."""
    hostport = hostport.strip().lower()
    if hostport.startswith("["):
        host, _, rest = hostport.partition("]")
        return host + "]", rest.removeprefix(":")
    host, _, port = hostport.partition(":")
    return host.rstrip("."), port


def _allowed(hostport: str, allowed: frozenset[str]) -> bool:
    host, port = _split(hostport)
    if not host:
        return False
    return is_loopback(host) or host in allowed or (bool(port) and f"{host}:{port}" in allowed)


def host_allowed(host_header: str | None, allowed: frozenset[str]) -> bool:
    """Whether a request's ``Host`` header names loopback or an allowed host (a missing one: no)."""
    return host_header is not None and _allowed(host_header, allowed)


def origin_allowed(origin_header: str | None, allowed: frozenset[str]) -> bool:
    """Whether a request's ``Origin`` header is absent, or an ``http(s)://`` origin on loopback or an allowed host."""
    if origin_header is None:
        return True
    parts = urlsplit(origin_header.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
        return False  # "null", file://, chrome-extension://, ...
    return _allowed(parts.netloc, allowed)
