"""Paths an indexing job may read: only under the source roots (``METIS_SOURCE_ROOTS``).

A path is resolved (every link followed) and checked when the job is sent
(400 at once) and again when the job starts (a folder swapped for a link
meanwhile fails the job). What callers see names paths relative to their root
(:func:`shown_path`, :func:`relative_to_roots`): the server's own folders are
not theirs to know.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import InvalidInput

__all__ = ["resolve_source_path", "shown_path", "relative_to_roots"]


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


def shown_path(path: Path, roots: Sequence[Path]) -> str:
    """Return `path` relative to the (innermost) source root holding it (``.`` for a root), else unchanged."""
    for root in sorted(roots, key=lambda r: len(str(r)), reverse=True):
        if path == root:
            return "."
        if path.is_relative_to(root):
            return str(path.relative_to(root))
    return str(path)


def relative_to_roots(value: Any, roots: Sequence[Path]) -> Any:
    """Return `value` (text, or lists and dicts of it) with every source root's absolute path made relative.

    ``/srv/docs/handbook/a.md: skipped`` becomes ``handbook/a.md: skipped`` under the
    root ``/srv/docs``; a root itself becomes ``.``. Other values are returned as they are.
    """
    if isinstance(value, str):
        for root in sorted(roots, key=lambda r: len(str(r)), reverse=True):
            if str(root) == "/":
                continue  # every path is under it: nothing of the server's to hide
            prefix = r"(?<![\w./-])" + re.escape(str(root))
            value = re.sub(prefix + r"/+(?=[^\s'\"])", "", value)
            value = re.sub(prefix + r"(?![\w-]|\.\w)", ".", value)
        return value
    if isinstance(value, list):
        return [relative_to_roots(v, roots) for v in value]
    if isinstance(value, tuple):
        return tuple(relative_to_roots(v, roots) for v in value)
    if isinstance(value, dict):
        return {k: relative_to_roots(v, roots) for k, v in value.items()}
    return value
