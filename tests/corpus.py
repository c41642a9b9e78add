"""Writing small corpora for the tests (not a test module)."""

from __future__ import annotations

from pathlib import Path


def write_corpus(folder: Path, files: dict[str, str]) -> Path:
    """Write ``{relative path: text}`` under `folder` (created, with any subfolders); return `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return folder
