"""Indexing jobs started through HTTP (``POST /bases/{name}/index``, ``GET /jobs/{id}``).

Jobs run one at a time on a worker thread, in the order sent; the last
:data:`KEEP_JOBS` are kept in memory (not across restarts).

A job resolves its paths again when it starts (:func:`~metis_pg.service.sources.resolve_source_path`):
a folder swapped for a link out of the source roots after the job was sent
fails the job. A job that fails says why: a :class:`~metis_pg.errors.MetisError`
gives its code and message (``BASE_BUSY``, ``INVALID_REQUEST``, ...); anything
else is a bug, reported as ``internal error`` and logged with its traceback.
Paths in what a job shows are relative to their source root.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..api import Metis
from ..access import check_groups
from ..errors import MetisError, NotFound
from .sources import relative_to_roots, resolve_source_path, shown_path

__all__ = ["Job", "Jobs", "KEEP_JOBS"]

log = logging.getLogger(__name__)

#: Finished jobs kept in memory for ``GET /jobs/{id}`` (oldest forgotten first).
KEEP_JOBS = 500


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


@dataclass
class Job:
    """An indexing run started through HTTP; read through ``GET /jobs/{id}``."""

    id: str
    base: str
    paths: list[str]  # as shown: relative to their source root
    source: str | None
    state: str = "queued"  # queued, running, done, failed
    documents_done: int = 0
    documents_total: int | None = None
    chunks: int = 0
    report: dict[str, Any] | None = None
    error: dict[str, str] | None = None
    created_at: str = field(default_factory=_now)
    started_at: str | None = None
    finished_at: str | None = None
    access: dict[str, Any] = field(default_factory=dict)  # readers, front_matter_readers (Metis.index)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "base": self.base,
            "paths": list(self.paths),
            "source": self.source,
            "state": self.state,
            "progress": {
                "documents_done": self.documents_done,
                "documents_total": self.documents_total,
                "chunks": self.chunks,
            },
            "report": self.report,
            "error": self.error,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }


class Jobs:
    """Indexing jobs run one at a time on a worker thread; the last :data:`KEEP_JOBS` are kept.

    Args:
        metis: the database the jobs index into.
        roots: the source roots (``METIS_SOURCE_ROOTS``) every path must stay under.
    """

    def __init__(self, metis: Metis, roots: Sequence[Path] = ()) -> None:
        self.metis = metis
        self.roots = tuple(roots)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metis-index")
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()

    def submit(self, base: str, paths: Sequence[str], source: str | None, *, readers: Sequence[str] | None = None,
               front_matter_readers: bool | None = None) -> Job:
        """Queue a job indexing `paths` (as sent: absolute or relative to a root) into `base`; return it.
        `readers` and `front_matter_readers`: as :meth:`metis_pg.Metis.index` takes them.

        Raises:
            InvalidInput: a path outside the source roots, or missing (checked now, and again when it starts).
        """
        resolved = [resolve_source_path(p, self.roots) for p in paths]
        if readers is not None:
            readers = list(check_groups(readers, what="reader"))  # 400 now, not a failed job
        job = Job(id=uuid.uuid4().hex, base=base, paths=[shown_path(p, self.roots) for p in resolved], source=source)
        with self._lock:
            self._jobs[job.id] = job
            while len(self._jobs) > KEEP_JOBS:
                self._jobs.popitem(last=False)
        job.access = {"readers": readers, "front_matter_readers": front_matter_readers}
        self._executor.submit(self._run, job, list(paths))
        return job

    def _run(self, job: Job, paths: list[str]) -> None:
        job.state, job.started_at = "running", _now()

        def progress(done: int, total: int, chunks: int) -> None:
            job.documents_done, job.documents_total, job.chunks = done, total, chunks

        try:
            # Again now: a folder swapped for a link since the job was sent must not lead out of the roots.
            resolved = [resolve_source_path(p, self.roots) for p in paths]
            report = self.metis.index(job.base, *resolved, source=job.source, on_progress=progress, **job.access)
        except MetisError as exc:
            log.warning("indexing job %s of base %s failed: [%s] %s", job.id, job.base, exc.code, exc.message)
            job.error = relative_to_roots(exc.to_dict()["error"], self.roots)
            job.state = "failed"
        except Exception:
            log.exception("indexing job %s of base %s failed", job.id, job.base)
            job.error, job.state = MetisError("internal error: see the server log").to_dict()["error"], "failed"
        else:
            job.report, job.state = relative_to_roots(report.to_dict(), self.roots), "done"
        finally:
            job.finished_at = _now()
        log.info("indexing job %s of base %s: %s", job.id, job.base, job.state)

    def get(self, job_id: str) -> Job:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise NotFound(f"no indexing job {job_id!r} (jobs are kept in memory until the service restarts)")
        return job

    def latest(self, base: str) -> Job | None:
        with self._lock:
            for job in reversed(self._jobs.values()):
                if job.base == base:
                    return job
        return None

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

