"""Which model services a base created over HTTP may call (``METIS_MODEL_URL_ALLOW_HOSTS``).

A base's ``embedding_url`` and ``reranker_url`` are called by the service, from
inside its network: given by any caller with a token, they would let the caller
make the service send requests to hosts only it can reach (server-side request
forgery). Over HTTP a model URL is therefore accepted only when its host (and
port) is on the operator's allow-list; with no list, no model URL is accepted
over HTTP (the bundled in-process model needs none). The CLI and the Python API
are trusted: they are not checked.

Entries are ``host`` (any port) or ``host:port``, IPv6 in brackets
(``[::1]:8081``). Hosts are compared as written, lower case: ``127.0.0.1`` does
not allow ``localhost`` or ``127.1``, and a name allowed is trusted whatever it
resolves to.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from ..errors import ConfigError, InvalidInput

__all__ = ["AllowedHosts", "parse_allow_hosts", "check_model_url", "parse_key_envs", "check_key_env"]

#: (host, port or None for any port) pairs.
AllowedHosts = frozenset[tuple[str, int | None]]

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _host(text: str) -> str:
    return text.strip().strip("[]").rstrip(".").lower()


def parse_allow_hosts(value: str | Sequence[str] | None) -> AllowedHosts:
    """Return the allow-list of `value` (``host[:port]`` items, comma-separated text or a list); blanks dropped.

    Raises:
        ConfigError: an item that is not a host or ``host:port`` (a URL, a path, a bad port).
    """
    if value is None:
        return frozenset()
    items = value.split(",") if isinstance(value, str) else list(value)
    allowed: set[tuple[str, int | None]] = set()
    for item in (i.strip() for i in items):
        if not item:
            continue
        bad = ConfigError(
            f"METIS_MODEL_URL_ALLOW_HOSTS: {item!r} is not a host or host:port (e.g. eos:8081, [::1]:8081)"
        )
        if any(c in item for c in "/@?# ") or "://" in item:
            raise bad
        host, port = item, None
        if item.startswith("["):
            inside, closed, rest = item[1:].partition("]")
            host = inside
            try:
                ipaddress.IPv6Address(inside)
            except ValueError:
                raise bad from None
            if not closed:
                raise bad
            if rest:
                if not rest.startswith(":"):
                    raise bad
                port = rest[1:]
        elif item.count(":") == 1:
            host, port = item.split(":")
        elif item.count(":") > 1:  # a bare IPv6 address, no port
            try:
                ipaddress.IPv6Address(item)
            except ValueError:
                raise bad from None
        if not _host(host) or (":" not in host and not re.fullmatch(r"[a-z0-9_.-]+", _host(host))):
            raise bad
        if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
            raise bad
        allowed.add((_host(host), int(port) if port is not None else None))
    return frozenset(allowed)


def check_model_url(field: str, url: str, allowed: AllowedHosts) -> None:
    """Refuse a model URL given over HTTP whose host and port are not on the allow-list.

    Args:
        field: the body field holding it (``embedding_url``, ``reranker_url``), for the message.

    Raises:
        InvalidInput: not an http(s) URL with a host, or its host:port is not allowed.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidInput(f"{field}: not a valid URL") from None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise InvalidInput(f"{field}: must be an http:// or https:// URL with a host")
    host = _host(parts.hostname)
    port = port if port is not None else _DEFAULT_PORTS[parts.scheme]
    if (host, None) in allowed or (host, port) in allowed:
        return
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    raise InvalidInput(
        f"{field}: the service may not call {where}: a base created over HTTP may name only model hosts the "
        "operator allows in METIS_MODEL_URL_ALLOW_HOSTS"
        + ("" if allowed else " (none are allowed now)")
        + "; or create the base with the CLI (metis base create) or the Python API"
    )


def parse_key_envs(value: str | Sequence[str] | None) -> frozenset[str]:
    """Return the environment variable names of `value` (comma-separated text or a list) a base created
    over HTTP may name as its API key's variable (``METIS_MODEL_KEY_ENVS``).

    Raises:
        ConfigError: an item that is not an environment variable name.
    """
    if value is None:
        return frozenset()
    items = [i.strip() for i in (value.split(",") if isinstance(value, str) else value)]
    for item in items:
        if item and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", item):
            raise ConfigError(f"METIS_MODEL_KEY_ENVS: {item!r} is not an environment variable name")
    return frozenset(i for i in items if i)


def check_key_env(field: str, name: str, allowed: frozenset[str]) -> None:
    """Refuse an API key variable named over HTTP that the operator did not list.

    Naming any variable would send its value (a database password, a cloud key) to
    the model host as a bearer token: only the operator's list may be named.

    Raises:
        InvalidInput: `name` is not on the list.
    """
    if name in allowed:
        return
    raise InvalidInput(
        f"{field}: a base created over HTTP may name only the key variables the operator allows in "
        "METIS_MODEL_KEY_ENVS" + ("" if allowed else " (none are allowed now)")
        + "; or create the base with the CLI (metis base create) or the Python API"
    )
