"""What the service's access log may show: no credential sent in a URL.

A client that puts its token in the URL (``/bases?access_token=...``, a
console link, a misconfigured proxy) would have it written to the access log,
which is kept longer and read by more people than the token's holder. The
filter :class:`RedactCredentials` replaces the value of every query parameter
whose name looks like a credential (:data:`CREDENTIAL_NAME`) by ``[REDACTED]``
before uvicorn's access line is formatted. The path and the other parameters
are kept.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote_plus

__all__ = ["RedactCredentials", "redact_query", "CREDENTIAL_NAME"]

#: Query parameter names whose values are redacted (any case; part of a longer name too: ``x_api_key``).
CREDENTIAL_NAME = re.compile(
    r"token|key|secret|passw|pwd|auth|bearer|credential|session|signature|^sig$|^code$", re.IGNORECASE)
REDACTED = "[REDACTED]"


def redact_query(target: str) -> str:
    """Return `target` (a path with an optional ``?query``) with the credential parameters' values redacted."""
    path, sep, query = target.partition("?")
    if not sep or not query:
        return target
    parts = []
    for item in query.split("&"):
        name, eq, value = item.partition("=")
        if not eq:  # a bare value (``?abcdef``): it may be a token itself
            parts.append(REDACTED if item else item)
        elif CREDENTIAL_NAME.search(unquote_plus(name)):
            parts.append(f"{name}={REDACTED}")
        else:
            parts.append(item)
    return f"{path}?{'&'.join(parts)}"


class RedactCredentials(logging.Filter):
    """A filter for ``uvicorn.access``: its record's path argument (``args[2]``) with credentials redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and "?" in args[2]:
            record.args = (*args[:2], redact_query(args[2]), *args[3:])
        return True
