"""Indexing jobs started through HTTP (``POST /bases/{name}/index``, ``GET /jobs/{id}``).

Jobs run one at a time on a worker thread, in the order sent; the last
:data:`KEEP_JOBS` are kept in memory (not across restarts).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..api import Metis
from ..errors import MetisError, NotFound

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
    paths: list[str]
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
    """Indexing jobs run one at a time on a worker thread; the last :data:`KEEP_JOBS` are kept."""

    def __init__(self, metis: Metis) -> None:
        self.metis = metis
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metis-index")
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()

    def submit(self, base: str, paths: list[Path], source: str | None) -> Job:
        job = Job(id=uuid.uuid4().hex, base=base, paths=[str(p) for p in paths], source=source)
        with self._lock:
            self._jobs[job.id] = job
            while len(self._jobs) > KEEP_JOBS:
                self._jobs.popitem(last=False)
        self._executor.submit(self._run, job, paths)
        return job

    def _run(self, job: Job, paths: list[Path]) -> None:
        job.state, job.started_at = "running", _now()

        def progress(done: int, total: int, chunks: int) -> None:
            job.documents_done, job.documents_total, job.chunks = done, total, chunks

        try:
            report = self.metis.index(job.base, *paths, source=job.source, on_progress=progress)
        except MetisError as exc:
            job.error, job.state = exc.to_dict()["error"], "failed"
        except Exception:
            log.exception("indexing job %s of base %s failed", job.id, job.base)
            job.error, job.state = MetisError("internal error: see the server log").to_dict()["error"], "failed"
        else:
            job.report, job.state = report.to_dict(), "done"
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

