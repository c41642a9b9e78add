"""A full disk foreseen: indexing stops before PostgreSQL runs out of space (issue 26).

An index run that filled the disk through the WAL took PostgreSQL down for every
base (PANIC on ``pg_wal/xlogtemp…``; each restart failed until space was freed),
and the ``metis index`` that caused it said only "the server closed the
connection". So before each write of an indexing run (a batch of documents, a
batch of vectors) :class:`DiskGuard` checks that what the write may take still
leaves a margin free, and stops the run with ``DISK_FULL`` otherwise, naming
the folder, the free and the needed space:

- the embedded server: the free space of the disk of its data folder
  (``shutil.disk_usage``), against the write's estimate plus the margin:
  ``METIS_DISK_FREE_MARGIN_BYTES`` (1 GB) or ``METIS_DISK_FREE_MARGIN_PCT`` (5) %
  of the disk, whichever is larger, and never under :data:`MIN_MARGIN_BYTES` (64 MB:
  PostgreSQL PANICs when it cannot write its next 16 MB WAL segment); what is left
  is for searches, the WAL and the checkpoints that recycle it;
- a server of your own (its disk is not this machine's): the database's size
  (``pg_database_size``) against ``METIS_DATABASE_MAX_BYTES`` when set (else not
  checked: that server's operator watches its disk).

The estimate is deliberately high: :data:`BYTES_PER_CHUNK` per chunk written
(its text, terms, postings and the WAL of all of them, measured at about 6 KB
of table and index and as much WAL) and :data:`BYTES_PER_VECTOR` per vector.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .errors import DiskFull

__all__ = ["DiskGuard", "BYTES_PER_CHUNK", "BYTES_PER_VECTOR", "MIN_MARGIN_BYTES"]

#: Bytes a chunk may take to write, WAL included (an over-estimate).
BYTES_PER_CHUNK = 24_000
#: Bytes a vector may take to write, WAL included (384 half floats, its row, index, WAL).
BYTES_PER_VECTOR = 4_000
#: The least margin kept on the embedded server's disk, whatever the settings: PostgreSQL PANICs
#: when it cannot create its next WAL segment (16 MB at once), measured with 6.4 MB still free
#: (benchmarks/full_disk.py, docs/reliability.md); four segments leave room for a checkpoint too.
MIN_MARGIN_BYTES = 64_000_000

_MB = 1_000_000


def _size(n: float) -> str:
    """Bytes in words: ``512 MB``, ``3.2 GB``."""
    if n >= 10 * 1000 * _MB:
        return f"{n / (1000 * _MB):.0f} GB"
    if n >= 1000 * _MB:
        return f"{n / (1000 * _MB):.1f} GB"
    return f"{max(0, n) / _MB:.0f} MB"


@dataclass
class DiskGuard:
    """Checks, before a write of an indexing run, that the database's disk keeps its margin.

    Attributes:
        data_folder: the embedded server's data folder (its disk is measured), or None.
        margin_bytes, margin_pct: the margin kept free: the larger of the two.
        max_database_bytes: a server of your own: the most its database may hold (None: not checked).
    """

    data_folder: Path | None
    margin_bytes: int = 1_000_000_000
    margin_pct: float = 5.0
    max_database_bytes: int | None = None

    @classmethod
    def of(cls, pool, settings) -> "DiskGuard":
        """The guard of `pool`'s database: its embedded server's data folder, else a server of your own."""
        return cls(data_folder=getattr(pool, "data_folder", None), margin_bytes=settings.disk_free_margin_bytes,
                   margin_pct=settings.disk_free_margin_pct, max_database_bytes=settings.database_max_bytes)

    def check_pool(self, pool, needed_bytes: int) -> None:
        """:meth:`check` for a write of `needed_bytes` through `pool` (its database's size, or its
        tablespaces' folders, read if needed)."""
        from . import sqlfiles

        def database_bytes() -> int:
            with pool.connection() as conn:
                return conn.execute(sqlfiles.load("storage/database_size")).fetchone()[0]

        def tablespace_folders() -> list[Path]:
            with pool.connection() as conn:
                return [Path(r[0]) for r in conn.execute(sqlfiles.load("storage/tablespace_folders"))]

        self.check(needed_bytes, database_bytes, tablespace_folders)

    def check(self, needed_bytes: int, database_bytes: "Callable[[], int] | None" = None,
              tablespace_folders: "Callable[[], list[Path]] | None" = None) -> None:
        """Raise :class:`DiskFull` when writing `needed_bytes` more would eat into the margin.

        Args:
            database_bytes: returns the database's size now (``pg_database_size``), for a
                server of your own with ``max_database_mb`` set.
            tablespace_folders: returns the folders of the embedded server's tablespaces: a
                table moved to one grows on that disk, measured too (margin without the WAL
                floor: the WAL stays in the data folder). Measured: without it, a tablespace's full
                disk failed the run with "could not extend file" (docs/reliability.md).

        Raises:
            DiskFull: naming the folder (or the database), the free and the needed space.
        """
        if self.data_folder is not None:
            self._check_tablespaces(needed_bytes, tablespace_folders)
            usage = shutil.disk_usage(self.data_folder)
            margin = max(self.margin_bytes, usage.total * self.margin_pct / 100, MIN_MARGIN_BYTES)
            if usage.free - needed_bytes < margin:
                raise DiskFull(
                    f"the database's disk is nearly full: {_size(usage.free)} free in {self.data_folder}, this "
                    f"write needs about {_size(needed_bytes)} and {_size(margin)} stay free for searches and the "
                    "WAL (METIS_DISK_FREE_MARGIN_BYTES, METIS_DISK_FREE_MARGIN_PCT): indexing stopped; what was "
                    "written is kept. Free some space and run `metis index` again"
                )
        elif self.max_database_bytes is not None and database_bytes is not None:
            size = database_bytes()
            limit = self.max_database_bytes
            if size + needed_bytes > limit:
                raise DiskFull(
                    f"the database holds {_size(size)} and this write needs about {_size(needed_bytes)} more, "
                    f"over METIS_DATABASE_MAX_BYTES ({_size(limit)}): indexing stopped; what was written is kept"
                )

    def _check_tablespaces(self, needed_bytes: int, folders: "Callable[[], list[Path]] | None") -> None:
        """:meth:`check` for each tablespace folder on another disk than the data folder."""
        if folders is None:
            return
        data_disk = self.data_folder.stat().st_dev if self.data_folder.exists() else None
        for folder in folders():
            try:
                if folder.stat().st_dev == data_disk:
                    continue
                usage = shutil.disk_usage(folder)
            except OSError:  # a folder this process may not read: the server's own business
                continue
            margin = max(self.margin_bytes, usage.total * self.margin_pct / 100)
            if usage.free - needed_bytes < margin:
                raise DiskFull(
                    f"the disk of the tablespace in {folder} is nearly full: {_size(usage.free)} free, this write "
                    f"needs about {_size(needed_bytes)} and {_size(margin)} stay free (METIS_DISK_FREE_MARGIN_BYTES, "
                    "METIS_DISK_FREE_MARGIN_PCT): indexing stopped; what was written is kept. Free some space and "
                    "run `metis index` again"
                )
