"""The service's settings: tokens, source roots, limits; parsing and the bind check.

Every setting of ``metis serve`` is a field of :class:`metis_pg.config.Settings`
(environment ``METIS_<NAME>``, docs/settings.md); :data:`SETTINGS` names them
(documented in docs/http.md, checked by a test). Arguments of
:func:`~metis_pg.service.create_app` and :func:`~metis_pg.service.serve` win over
the environment.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from ..config import Settings
from ..errors import ConfigError

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "Limits",
    "MIN_TOKEN_CHARS",
    "SETTINGS",
    "parse_tokens",
    "parse_source_roots",
    "is_loopback",
    "check_bind",
]

#: Largest request body in bytes (``METIS_MAX_BODY_BYTES``); more is HTTP 413.
DEFAULT_MAX_BODY_BYTES: int = Settings.model_fields["max_body_bytes"].default
#: Shortest bearer token accepted in ``METIS_API_TOKENS``.
MIN_TOKEN_CHARS = 16

#: The fields of :class:`~metis_pg.config.Settings` the service reads.
SERVICE_FIELDS = (
    "api_tokens", "source_roots", "max_body_bytes", "max_inflight_searches", "request_read_timeout_s",
    "keep_alive_timeout_s", "max_connections", "model_url_allow_hosts", "model_key_envs", "allowed_hosts",
    "search_queue_s", "search_workers",
)
#: (environment variable, default, help): every setting of the service, documented in docs/http.md.
SETTINGS: tuple[tuple[str, str, str], ...] = tuple(
    (f"METIS_{name.upper()}", "" if info.default_factory else str(info.default), info.description or "")
    for name, info in Settings.model_fields.items() if name in SERVICE_FIELDS
)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one client may cost the service; see :data:`SETTINGS`.

    Attributes:
        max_body_bytes: largest request body (bytes); more is 413.
        max_inflight_searches: ``POST /search`` and ``/compare`` computed at once;
            one more is answered 503 ``OVERLOADED`` with ``Retry-After`` at once.
        request_read_timeout_s: seconds a client has to send a request's headers
            (from the connection or the request's first byte), and again its body;
            else 408 ``REQUEST_TIMEOUT`` and the connection is closed.
        keep_alive_timeout_s: seconds an idle keep-alive connection stays open.
        max_connections: open connections at most; one more is answered 503 and closed.
        search_workers: admitted searches computed at the same moment; the others wait their turn.
        search_queue_s: seconds an admitted search may wait for its turn; then 503 ``OVERLOADED``
            with ``Retry-After``.
    """

    max_body_bytes: int
    max_inflight_searches: int
    request_read_timeout_s: float
    keep_alive_timeout_s: float
    max_connections: int
    search_workers: int = 4
    search_queue_s: float = 1.0

    @classmethod
    def resolve(cls, settings: Settings, **given: float | None) -> "Limits":
        """Return the limits: each of `given` that is not None, else from `settings`.

        Raises:
            ConfigError: a limit that is not a positive number.
        """
        values = {}
        for f in fields(cls):
            value = given.get(f.name)
            if value is None:
                value = getattr(settings, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"{f.name} must be a positive number, not {value!r}")
            values[f.name] = value
        return cls(**values)


def parse_tokens(value: str | Sequence[str] | None, *, variable: str = "METIS_API_TOKENS") -> tuple[str, ...]:
    """Return the bearer tokens of `value` (comma-separated text or a list), blanks dropped.

    Args:
        variable: the environment variable the tokens come from, named in the error.

    Raises:
        ConfigError: a token shorter than :data:`MIN_TOKEN_CHARS` characters.
    """
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    tokens = tuple(t.strip() for t in items if t and t.strip())
    short = [t for t in tokens if len(t) < MIN_TOKEN_CHARS]
    if short:
        raise ConfigError(
            f"a token of {variable} has {len(short[0])} characters; use at least {MIN_TOKEN_CHARS} "
            "(for example: openssl rand -hex 24)"
        )
    return tokens


def parse_source_roots(value: str | Sequence[str | os.PathLike] | None) -> tuple[Path, ...]:
    """Return the source roots of `value` (colon-separated text or a list), resolved (symlinks followed).

    Raises:
        ConfigError: a root that is not an existing folder.
    """
    if value is None:
        return ()
    items = value.split(":") if isinstance(value, str) else list(value)
    roots = []
    for item in items:
        if not str(item).strip():
            continue
        root = Path(os.path.realpath(Path(item).expanduser()))
        if not root.is_dir():
            raise ConfigError(f"source root {str(item)!r} of METIS_SOURCE_ROOTS is not a folder")
        roots.append(root)
    return tuple(dict.fromkeys(roots))


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, tokens: Sequence[str], *, variable: str = "METIS_API_TOKENS",
               risk: str = "read and drop every base") -> None:
    """Refuse to serve beyond loopback without a token.

    Args:
        variable: the environment variable holding the tokens, named in the error.
        risk: what anyone who reaches the server could do, named in the error.

    Raises:
        ConfigError: `host` is not a loopback address and no token is configured.
    """
    if not tokens and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host!r} without a token: anyone who reaches it could {risk}. "
            f"Set {variable} (comma-separated, 16+ characters each) or bind 127.0.0.1"
        )
