"""Paths an indexing job may read: only under the source roots (``METIS_SOURCE_ROOTS``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..errors import InvalidInput

__all__ = ["resolve_source_path"]


def resolve_source_path(raw: str, roots: Sequence[Path]) -> Path:
    """Return the real path of `raw` (absolute, or relative to a source root) inside a source root.

    Symbolic links are followed before the check, so neither ``..`` nor a link can
    lead out of the roots. A relative path is looked up in each root, in order.

    Raises:
        InvalidInput: no roots configured, or the path is outside every root or does not exist.
    """
    if not roots:
        raise InvalidInput("indexing through HTTP is off: set METIS_SOURCE_ROOTS to the folders it may read")
    if not raw or "\x00" in raw:
        raise InvalidInput("a path must be a non-empty string without NUL characters")
    path = Path(raw)
    candidates = [path] if path.is_absolute() else [root / path for root in roots]
    inside = False
    for candidate in candidates:
        real = Path(os.path.realpath(candidate))
        if any(real == root or real.is_relative_to(root) for root in roots):
            inside = True
            if real.exists():
                return real
    if inside:
        raise InvalidInput(f"no such file or folder under the source roots: {raw!r}")
    raise InvalidInput(f"path {raw!r} is outside the source roots: indexing reads only under METIS_SOURCE_ROOTS")
