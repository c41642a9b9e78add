"""Sources: the files a folder gives (walk, links), their hashes, and the folders a base may read.

The walk never leaves its folder: hidden files and folders are skipped, links to folders are
not followed, links to files outside the folder (or to a file indexed under its own name) are
skipped with a reason. A folder inside (or holding) another source's folder is refused: its
files would be indexed twice.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg

from .. import storage
from ..errors import InvalidInput, UnreadableDocument
from ..readers import display_path, kind_of

__all__ = ["SourcePlan", "walk_source", "final_target", "plan_source", "refuse_nested_sources", "refuse_reserved_names"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SourcePlan:
    """What one path given to ``index`` reads.

    Attributes:
        name: the source's name. root: its folder (resolved). files: the files to read, sorted.
        deletes: whether documents of the source absent from `files` are deletions (a folder: yes;
            a single file: no).
    """

    name: str
    root: Path
    files: list[Path]
    deletes: bool


def walk_source(
    root: Path,
    on_skip: Callable[[Path, str], None] | None = None,
    on_unlisted: Callable[[Path, str], None] | None = None,
) -> Iterator[Path]:
    """Yield the files under `root` a base reads, sorted, never leaving `root`.

    Hidden files and folders (``.git``) are skipped; symbolic links to folders
    are not followed (no loops), links to files outside `root`, dangling links
    and link loops are skipped, and so are links to a file of `root` that is
    indexed under its own name (no document twice): each is logged and given to
    `on_skip(path, reason)`.

    The walk is iterative (a folder nested thousands of levels deep raises no
    RecursionError). A folder that cannot be listed (no permission, I/O error,
    name too long) is logged and given to `on_unlisted(folder, reason)`; the walk
    goes on. A file whose type cannot be read is yielded: opening it gives the reason.
    """
    root = root.resolve()
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError as exc:
            reason = f"cannot be listed ({exc.strerror or exc})"
            log.warning("folder %s %s", display_path(str(folder)), reason)
            if on_unlisted is not None:
                on_unlisted(folder, reason)
            continue
        folders: list[str] = []
        files: list[os.DirEntry] = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                is_folder = entry.is_dir()
            except OSError:
                is_folder = False
            if is_folder:
                try:
                    link = entry.is_symlink()
                except OSError:
                    link = True
                if not link:
                    folders.append(entry.name)
            elif kind_of(entry.name) is not None:
                files.append(entry)
        for entry in sorted(files, key=lambda e: e.name):
            path = folder / entry.name
            reason = _link_refusal(root, path, entry)
            if reason is not None:
                log.warning("skipped %s: %s", display_path(str(path)), reason)
                if on_skip is not None:
                    on_skip(path, reason)
                continue
            yield path
        stack.extend(folder / name for name in sorted(folders, reverse=True))


def _link_refusal(root: Path, path: Path, entry: os.DirEntry) -> str | None:
    """Return why a symbolic link `path` is not followed, or None (not a link, or a link to a file in `root`)."""
    try:
        if not entry.is_symlink():
            return None
    except OSError:
        return None  # opening the file says what is wrong with it
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):  # ELOOP (RuntimeError before Python 3.13), dangling
        return "symbolic link loop or dangling link: not followed"
    if not target.is_relative_to(root):
        return f"symbolic link leaving {root}: not followed"
    try:
        if not target.is_file():
            return "symbolic link to something other than a file: not followed"
    except OSError as exc:
        return f"symbolic link to something that cannot be read ({exc.strerror or exc}): not followed"
    inside = target.relative_to(root)
    if kind_of(target.name) is not None and not any(part.startswith(".") for part in inside.parts):
        # Debian's docs link index.html -> python-policy.html: the target is indexed itself, and a
        # second copy would put every passage twice in the results.
        return f"symbolic link to {display_path(inside.as_posix())}, which is indexed under its own name"
    return None


def final_target(path: Path, root: Path) -> Path:
    """Return the file to open for `path`: itself, or, for a symbolic link, its target checked
    again to lie inside `root` (a link replaced since the listing could point anywhere).

    The target is then opened without following links (:func:`metis_pg.readers.read_file_once`):
    a file swapped for a link after this check is refused there.

    Raises:
        UnreadableDocument: a link loop, a dangling link, or a link leaving `root`.
    """
    if not os.path.islink(path):
        return path
    shown = display_path(str(path))
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # ELOOP (RuntimeError before Python 3.13), dangling
        raise UnreadableDocument(f"{shown}: symbolic link loop or dangling link: not followed") from exc
    if not target.is_relative_to(root):
        raise UnreadableDocument(f"{shown}: symbolic link leaving {display_path(str(root))}: not followed")
    return target


def refuse_nested_sources(conn: psycopg.Connection, base: storage.BaseRow, plans: Sequence[SourcePlan]) -> None:
    """Refuse files another source of the base already reads: they would be indexed twice, under two
    sources, and every passage would come up twice.

    `plans` say what each path to index reads (:class:`SourcePlan`). A whole folder reads
    every file under it, now and when indexed again; a source of single files (``metis index
    README.md``) reads only those files, not its folder: ``docs/`` and ``README.md`` beside it are two
    sources that share no file, as ``metis demo`` indexes them, again and again.

    Raises:
        InvalidInput: naming the source that already reads them and a command that works instead.
    """
    rows = storage.folder_sources(conn, base.base_id)
    for name, root, files, whole in ((p.name, p.root, p.files, p.deletes) for p in plans):
        mine = set(files)
        for other_name, other_root, other_whole, _, other_paths in rows:
            other = Path(other_root)
            if other_name == name or (whole and other_whole and root == other):
                continue  # the same source (its folder is checked by storage.ensure_source)
            whose = f"which source {other_name!r} of base {base.name!r} already reads"
            if other_whole:
                inside = ([root] if root.is_relative_to(other) else []) if whole else [
                    f for f in files if f.is_relative_to(other)]
                if inside:
                    raise InvalidInput(
                        f"{display_path(str(inside[0]))} is inside {display_path(other_root)}, {whose}: index that"
                        f" folder again (metis index {display_path(other_root)} --base {base.name}; unchanged files"
                        f" are skipped)")
                if whole and other.is_relative_to(root):
                    raise InvalidInput(
                        f"{display_path(str(root))} holds {display_path(other_root)}, {whose}: its files would be"
                        f" indexed twice; index the other folders one by one, or into another base")
                continue
            theirs = [other / p for p in other_paths]  # a source of single files reads those files only
            shared = [f for f in theirs if (f.is_relative_to(root) if whole else f in mine)]
            if shared:
                again = (f"metis index {display_path(str(root if whole else shared[0]))} --base {base.name}"
                         f" --source {other_name}")
                raise InvalidInput(
                    f"{display_path(str(shared[0]))} is a document of source {other_name!r} of base {base.name!r}"
                    f" already: its passages would come up twice; index it under that source ({again})"
                    if root == other else
                    f"{display_path(str(root))} holds {display_path(str(shared[0]))}, {whose}: its files would be"
                    f" indexed twice; index the other folders one by one, or into another base")


def plan_source(
    path: Path,
    source_name: str | None,
    on_skip: Callable[[Path, str], None] | None = None,
    on_unlisted: Callable[[Path, str], None] | None = None,
) -> SourcePlan:
    """Return what `path` reads: a folder is a source (named after it unless `source_name`), a
    single file is read into the source of its folder.

    Raises:
        InvalidInput: `path` does not exist, cannot be examined, or is a file of a kind not read.
    """
    path = path.expanduser()
    shown = display_path(str(path))
    try:
        if not path.exists():
            raise InvalidInput(f"no such file or folder: {shown}")
        if path.is_dir():
            root = path.resolve()
            name = source_name or display_path(root.name) or "root"
            return SourcePlan(name, root, list(walk_source(root, on_skip, on_unlisted)), True)
    except OSError as exc:
        raise InvalidInput(f"cannot read {shown}: {exc.strerror or exc}") from exc
    if kind_of(path.name) is None:
        raise InvalidInput(f"{shown}: not a kind metis reads (md, txt, html, pdf, docx)")
    root = path.resolve().parent
    return SourcePlan(source_name or display_path(root.name) or "root", root, [path.resolve()], False)


def refuse_reserved_names(base: storage.BaseRow, plans: Sequence[SourcePlan]) -> None:
    """Refuse a folder source named like the base's notes and facts source (``metis-<base>``).

    Raises:
        InvalidInput: naming the option to give it another name.
    """
    for plan in plans:
        if plan.name == f"metis-{base.name}":
            raise InvalidInput(
                f"the source name {plan.name!r} is reserved for the notes and facts of base {base.name!r}:"
                " name the folder's source with --source"
            )


