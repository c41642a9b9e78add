"""Reading a file's bytes once, safely: no FIFO, device or swapped-in link, no read without end.

An indexer that checks ``is_file()`` and then opens the path races whoever
writes the folder: a FIFO swapped in between hangs the ``open`` forever (and
holds the base's lock), and a file replaced between the hash and the reading
stores one version's hash with the other's text. So :func:`read_file_once`:

- opens with ``O_NONBLOCK`` (opening a FIFO with no writer returns at once) and
  ``O_NOFOLLOW`` (a file that became a symbolic link since it was listed is
  refused; a link the folder holds is resolved first and its target checked to
  be inside the folder by the caller, then opened without following further);
- ``fstat`` s the opened descriptor and refuses anything that is not a regular
  file, so what is read is what was checked;
- reads the bytes once, at most `max_bytes` + 1 of them: the caller hashes and
  parses those same bytes;
- reads in a thread it waits for at most `timeout_s`: a read blocked in the
  kernel (a stalled network file system, a FUSE mount) is given up with a reason
  and the run goes on; the thread is left to finish or block, closing the file when
  the read returns.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable

from ..errors import UnreadableDocument
from ._common import unreadable

__all__ = ["read_file_once"]

#: What the type bits of ``st_mode`` are, in words.
_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"),
)


def _what(mode: int) -> str:
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def read_file_once(path: str, *, max_bytes: int, timeout_s: float | None = None,
                   too_large: Callable[[int], str] | None = None) -> bytes:
    """Return the bytes of the regular file at `path` (rules in the module docstring).

    Args:
        path: the file; a symbolic link is refused (resolve it first).
        max_bytes: larger files are refused.
        timeout_s: seconds the open and the reading may take (None: no bound).
        too_large: the reason given for a file of that many bytes over `max_bytes` (default:
            ``file too large: N bytes, over the M-byte limit``).

    Raises:
        UnreadableDocument: not a regular file (named: "a FIFO (named pipe)"), a symbolic
            link now, over `max_bytes`, cannot be opened, or the read did not finish in time.
    """
    result: dict[str, object] = {}
    done = threading.Event()

    def work() -> None:
        try:
            result["data"] = _read(path, max_bytes, too_large)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            result["error"] = exc
        finally:
            done.set()

    if timeout_s is None:
        work()
    else:
        threading.Thread(target=work, name="metis-read-file", daemon=True).start()
        if not done.wait(timeout_s):
            raise unreadable(path, f"reading did not finish within {timeout_s:g} s (a stalled network or FUSE "
                                   "file system?): skipped")
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["data"]  # type: ignore[return-value]


def _read(path: str, max_bytes: int, too_large: Callable[[int], str] | None) -> bytes:
    def refused(size: int | None) -> UnreadableDocument:
        if too_large is not None and size is not None:
            return unreadable(path, too_large(size))
        shown = f"{size} bytes, over" if size is not None else "over"
        return unreadable(path, f"file too large: {shown} the {max_bytes}-byte limit")

    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise unreadable(path, "became a symbolic link after the folder was listed: not followed") from exc
        raise unreadable(path, f"cannot open: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise unreadable(path, f"{_what(info.st_mode)}, not a regular file: skipped")
        if info.st_size > max_bytes:
            raise refused(info.st_size)
        os.set_blocking(fd, True)  # a regular file: reads wait for the disk, as they should
        parts: list[bytes] = []
        size = 0
        while size <= max_bytes:
            block = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not block:
                break
            parts.append(block)
            size += len(block)
    except UnreadableDocument:
        raise
    except OSError as exc:
        raise unreadable(path, f"cannot read: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    if size > max_bytes:
        raise refused(None)
    return b"".join(parts)
