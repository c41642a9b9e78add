"""Watch mode (issue 21, part 3): follow the folder sources of bases and index what changes.

``metis watch [PATHS] [--base B]`` and ``metis serve --watch`` run :class:`Watcher`. It gets
file events from the operating system through watchfiles (inotify on Linux: no polling loop,
so an idle watcher costs no CPU) and runs the same incremental indexing as ``metis index``
(words first, then vectors) on each folder where something changed:

- create, modify, delete, rename, a folder moved in or out: the folder source is indexed
  again, which reads only new or changed files (their SHA-256 differs), deletes the documents
  of files that are gone, and keeps the vectors of unchanged chunk texts;
- a burst (``git checkout`` touching 5,000 files) is one set of changes: watchfiles gathers
  events while they keep coming and yields them once none came for :data:`QUIET_MS` (300 ms:
  a single save is indexed that soon), or after :data:`BURST_CAP_MS` (30 s, ``debounce_ms``)
  of events that never paused; each folder touched is then indexed ONCE for the whole set,
  not once per file. The burst ends on a quiet gap, not on a clock: 5,000 files written over
  4 s (or 20 s) are one run (the cap was 1.6 s, and a burst longer than that was cut in two
  runs). A file written again and again (a log) does not hold a burst open: watchfiles counts
  distinct (change, path) pairs, and the same pair again adds none. Events that come during a
  run are gathered meanwhile and make one more run after it (one, however many they are);
- the folders are followed before the pending runs (the catch-up at start, a folder back)
  index them, so a file saved during such a run makes one more run;
- when the folders are polled (WATCHFILES_FORCE_POLLING, WSL, or once a file name that is not
  UTF-8 broke the file events), :class:`_Poll` polls them, not watchfiles: it compares each
  file's modification time in nanoseconds (watchfiles' poller kept whole seconds, and missed a
  file written again within the second it had last dated it);
- a file that fails is skipped with its reason (the run's report), and watching goes on;
- the database or the model restarting does not end it: a run that fails for want of the
  database is tried again every ``retry_s`` seconds, and chunks left without a vector while
  the model was down are embedded by the next run;
- Ctrl-C (KeyboardInterrupt: ``metis watch`` exits 130) or SIGTERM (exit 0) stop it cleanly
  between two batches of the indexer (a batch is one transaction: nothing half written).

While it runs, each watched base's ``watched_at`` is refreshed every ``heartbeat_s`` seconds
and ``caught_up_at`` is set when a run finishes with nothing left to do; ``metis status``, the
HTTP API and the console's Bases page say the base is watched while ``watched_at`` is less
than :data:`WATCHED_FOR_S` seconds old (sql/bases/list.sql).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from .errors import BaseNotFound, DatabaseUnavailable, InvalidInput, MetisError
from .readers import kind_of
from .reports import IndexReport

if TYPE_CHECKING:  # pragma: no cover
    from .api import Metis

__all__ = ["Watched", "Watcher", "BURST_CAP_MS", "QUIET_MS", "WATCHED_FOR_S", "TERMINATED", "Terminated",
           "stop_on_sigterm", "resolve_targets"]

log = logging.getLogger(__name__)

#: A set of changes ends once no new event came for this long (milliseconds): watchfiles' ``step``.
QUIET_MS = 300
#: A set of changes whose events never pause for QUIET_MS is yielded after this long anyway
#: (milliseconds): watchfiles' ``debounce``, the default of ``metis watch --debounce-ms``. Long, so
#: that a checkout written over many seconds is one run; a save ends its burst after QUIET_MS.
BURST_CAP_MS = 30_000
#: A base is shown as watched while its watcher's last sign of life is younger than this
#: (seconds): three heartbeats (sql/bases/list.sql says the same number).
WATCHED_FOR_S = 90


class Terminated(BaseException):
    """Raised in the main thread by SIGTERM once :func:`stop_on_sigterm` is installed (``metis watch`` exits 0).

    A BaseException, as KeyboardInterrupt: no ``except Exception`` on the way (one file's failure
    in the indexer, a model call) takes it for an error and goes on."""


#: Set once SIGTERM arrived: watchfiles turns any exception of a signal handler that runs while it
#: waits into KeyboardInterrupt, so the caller tells SIGTERM from Ctrl-C by this.
TERMINATED = threading.Event()


def stop_on_sigterm() -> None:
    """Make SIGTERM raise :class:`Terminated` in the main thread (KeyboardInterrupt when it comes
    while watchfiles waits; :data:`TERMINATED` is set either way): it unwinds the indexer like
    Ctrl-C (the batch being written is rolled back, everything committed stays)."""
    import signal

    def terminate(signum: int, frame: object) -> None:
        TERMINATED.set()
        raise Terminated()

    signal.signal(signal.SIGTERM, terminate)


@dataclass(frozen=True, slots=True)
class Watched:
    """A folder source followed: the base it belongs to, its folder (resolved) and its name."""

    base: str
    root: Path
    source: str


@dataclass
class _State:
    pending: set[Watched] = field(default_factory=set)  # to index again: changed, or their last run failed
    retry_at: float = 0.0  # a run failed (database down): no run before this
    # Indexed, but chunks were left without a vector (the model was down): indexed again at embed_at
    # to embed them. A change to any folder meanwhile is indexed at once, not held until then.
    embed_later: set[Watched] = field(default_factory=set)
    embed_at: float = 0.0


class Watcher:
    """Follow folder sources and index what changes (see the module docstring).

    Args:
        metis: the library (its pool, settings and models).
        targets: the folder sources to follow (:meth:`targets_of`).
        debounce_ms: a set of changes is yielded after this long at most, even while events
            keep coming (milliseconds; watchfiles' ``debounce``); it is yielded sooner, once no
            new event came for :data:`QUIET_MS`.
        heartbeat_s: how often the bases' ``watched_at`` is refreshed, and the most a stop
            request or a retry waits (seconds).
        retry_s: a run that failed (database down) is tried again after this many seconds.
        on_report: called with each run's (target, report or None, error message or None).
    """

    def __init__(self, metis: Metis, targets: Sequence[Watched], *, debounce_ms: int = BURST_CAP_MS,
                 heartbeat_s: float = 30.0, retry_s: float = 5.0,
                 on_report: Callable[[Watched, IndexReport | None, str | None], None] | None = None) -> None:
        if not targets:
            raise InvalidInput("nothing to watch: index a folder into the base first (metis index DIR --base B)")
        self.metis = metis
        self.targets = list(targets)
        self.debounce_ms = debounce_ms
        self.heartbeat_s = heartbeat_s
        self.retry_s = retry_s
        self.on_report = on_report
        self.stop_event = threading.Event()
        self.runs = 0  # indexing runs finished (one per folder per set of changes)
        self.runs_started = 0
        # Set once a file name that is not UTF-8 broke the file events (see _follow): poll from then on.
        self.polling = False
        self._state = _State()

    # -- what to watch ------------------------------------------------------------------

    @staticmethod
    def targets_of(metis: Metis, bases: Iterable[str] | None = None) -> list[Watched]:
        """Return the folder sources of `bases` (default: every base) that are whole folders.

        A source of single files, or one whose folder no longer exists, is left out with a log line.

        Raises:
            BaseNotFound: a base named does not exist.
        """
        names = list(bases) if bases else metis.base_names()
        found: list[Watched] = []
        for name in names:
            for s in metis.sources(name):
                root = Path(s.root) if s.root else None
                if root is None or not s.whole_folder:
                    log.info("base %r: source %r is single files, not a folder: not watched", name, s.name)
                elif not root.is_dir():
                    log.warning("base %r: folder %s of source %r does not exist: not watched", name, root, s.name)
                else:
                    found.append(Watched(name, root.resolve(), s.name))
        return found

    # -- the loop -----------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the watcher to stop: it returns once the batch being written is committed."""
        self.stop_event.set()

    def run(self, *, catch_up: bool = True) -> None:
        """Watch until :meth:`stop` (or KeyboardInterrupt, which propagates).

        Args:
            catch_up: index every target once first (what changed while nobody watched).
        """
        bases = sorted({t.base for t in self.targets})
        log.info("watching %s", ", ".join(f"{t.base}:{t.root}" for t in self.targets))
        if catch_up:
            self._state.pending.update(self.targets)
        self._heartbeat(bases)
        try:
            self._watch(bases)
        finally:
            self._heartbeat(bases, leaving=True)

    def _watch(self, bases: Sequence[str]) -> None:
        """Follow the folders there are; when one goes or comes back, follow the ones there are then.

        watchfiles refuses a folder that does not exist (``FileNotFoundError: No path was found``):
        a folder moved away as the watch started ended `metis watch` with a traceback. With none
        there, the targets are tried again every ``retry_s`` (each run says "folder gone").
        """
        last_beat = time.monotonic()
        while not self.stop_event.is_set():
            roots = {t.root for t in self.targets if t.root.is_dir()}
            if not roots:
                self._state.pending.update(self.targets)
                self.stop_event.wait(self.retry_s)
                # Still gone: the run says so. Back: it runs once the folders are followed again (a
                # run before that missed a file saved between its walk and the new watch: never indexed).
                if not any(t.root.is_dir() for t in self.targets):
                    self._run_pending()
                continue
            try:
                last_beat = self._follow(roots, bases, last_beat)
            except FileNotFoundError:  # a folder went between the check and the watch's start
                continue

    def _follow(self, roots: set[Path], bases: Sequence[str], last_beat: float) -> float:
        """Watch `roots` until stopped, or until the folders there are differ from `roots`; return the
        time of the last heartbeat.

        The folders are followed first, then the pending runs (the catch-up at start, a folder
        back) index them: what changes during those runs is gathered and makes one more run. They
        ran before the watch began, and a file saved during them, after their walk, was never
        indexed. watchfiles' ``watch()`` starts following only once it waits for the first event,
        so its documented backend (``RustNotify``, whose ``watch`` is the wait that ``watch()``
        loops on) is used directly.

        Raises:
            FileNotFoundError: a folder of `roots` went before it was followed.
            KeyboardInterrupt: Ctrl-C (or SIGTERM: :data:`TERMINATED` says which) while waiting.
        """
        from watchfiles import Change
        from watchfiles._rust_notify import RustNotify, WatchfilesRustInternalError
        from watchfiles.main import _default_force_polling, _default_poll_delay_ms

        # The wait's timeout (milliseconds): the longest it blocks; it answers "timeout" then, for the
        # heartbeat, retries and the stop request. No polling of the files (inotify).
        timeout_ms = int(min(self.heartbeat_s, self.retry_s) * 1000)
        # Polling as watch() decides it (WATCHFILES_FORCE_POLLING, WATCHFILES_POLL_DELAY_MS, WSL), since
        # network and WSL mounts give no inotify events; by _Poll, not by watchfiles' poller (see there).
        # RustNotify's arguments: paths, debug, force_polling, poll_delay_ms, recursive, ignore_permission_denied.
        poll_delay_ms = _default_poll_delay_ms(300)
        notify = (_Poll(roots, poll_delay_ms) if self.polling or _default_force_polling(None)
                  else RustNotify([str(r) for r in sorted(roots)], False, False, poll_delay_ms, True, False))
        with notify:
            self._run_pending()
            while not self.stop_event.is_set():
                try:
                    raw = notify.watch(self.debounce_ms, QUIET_MS, timeout_ms, self.stop_event)
                except WatchfilesRustInternalError as exc:
                    self._broken_events(exc, roots)
                    break
                if raw == "signal":  # a signal's handler raised (Ctrl-C, SIGTERM) while waiting
                    raise KeyboardInterrupt
                if raw == "stop":
                    break
                changes = [] if raw == "timeout" else [p for c, p in raw if _relevant(Change(c), p)]
                if changes:
                    touched = self._targets_touched(changes)
                    log.info("%d changes in %s", len(changes), ", ".join(sorted(f"{t.base}:{t.source}" for t in touched)))
                    self._state.pending.update(touched)
                if time.monotonic() - last_beat >= self.heartbeat_s:
                    self._heartbeat(bases)
                    last_beat = time.monotonic()
                self._run_pending()
                there = {t.root for t in self.targets if t.root.is_dir()}
                if there != roots:  # a folder went (or is back: a new folder, maybe): follow the ones there are
                    self._state.pending.update(t for t in self.targets if t.root in there - roots)
                    break
        return last_beat

    def _broken_events(self, exc: Exception, roots: set[Path]) -> None:
        """The file events of `roots` failed: follow them anew, and index them again (what changed is unknown).

        watchfiles cannot name a file whose name is not UTF-8 (``bad-\\xff.txt``): any event on it,
        even the indexer opening it to read it, raises "Unable to decode path" from then on at every
        wait, and the events gathered with it are lost. That ended `metis watch` (a traceback, exit
        1) and the watch of `metis serve --watch`. Reads make no event when the folders are polled
        (only a changed modification time, size or inode does), and :class:`_Poll` names such a
        file, so the watch polls from then on: it says so once.
        Any other error of the events: followed anew after ``retry_s``.
        """
        message = str(exc)
        if "decode path" in message and not self.polling:
            self.polling = True
            log.warning("watch: %s (a file name that is not UTF-8): file events cannot name it, so the folders "
                        "are polled from now on; rename the file and start the watch again to go back to events",
                        message)
        elif "decode path" not in message:
            log.warning("watch: the file events failed (%s): followed again in %g s", message, self.retry_s)
            self.stop_event.wait(self.retry_s)
        self._state.pending.update(t for t in self.targets if t.root in roots)

    def _targets_touched(self, paths: Iterable[str]) -> set[Watched]:
        touched: set[Watched] = set()
        for raw in paths:
            path = Path(raw)
            for t in self.targets:
                if path == t.root or path.is_relative_to(t.root):
                    touched.add(t)
        return touched

    def _run_pending(self) -> None:
        """Index every pending target once; one that fails stays pending (retried after retry_s)."""
        state = self._state
        now = time.monotonic()
        if state.embed_later and now >= state.embed_at:
            state.pending |= state.embed_later
            state.embed_later.clear()
        if not state.pending or now < state.retry_at:
            return
        for target in sorted(state.pending, key=lambda t: (t.base, str(t.root))):
            if self.stop_event.is_set():
                return
            self.runs_started += 1
            report, error = self._index(target)
            self.runs += 1
            if self.on_report:
                self.on_report(target, report, error)
            if error is None:
                state.pending.discard(target)
                state.embed_later.discard(target)
                # The model was down: embed later (not the chunks it refused: they are not sent again).
                # Not through retry_at: a file saved meanwhile waited for it (heartbeat_s, 30 s), not 300 ms.
                if report is not None and report.chunks_without_vector > report.chunks_refused:
                    state.embed_later.add(target)
                    state.embed_at = time.monotonic() + self.heartbeat_s
                else:
                    self._caught_up(target.base)
            else:
                state.retry_at = time.monotonic() + self.retry_s

    def _index(self, target: Watched) -> tuple[IndexReport | None, str | None]:
        if not target.root.is_dir():
            return None, f"{target.root}: folder gone (moved or deleted): its documents are kept until it is back"
        try:
            return self.metis.index(target.base, target.root, source=target.source), None
        except (DatabaseUnavailable, psycopg.OperationalError, psycopg.InterfaceError) as exc:
            message = getattr(exc, "message", None) or str(exc).strip() or type(exc).__name__
            return None, f"database unavailable ({message}): tried again in {self.retry_s:g} s"
        except MetisError as exc:  # base busy, a model error that is not "down", a refused folder
            return None, f"{exc.code}: {exc.message}"

    def _heartbeat(self, bases: Sequence[str], *, leaving: bool = False) -> None:
        """Refresh the bases' ``watched_at`` (NULL when leaving); a database that is down is skipped."""
        # Two statements, not CASE ... now(): Citus refuses a function that is not immutable in a CASE
        # of a write to the reference table bases (docs/scaling.md).
        statement = ("UPDATE bases SET watched_at = NULL WHERE name = ANY(%s)" if leaving
                     else "UPDATE bases SET watched_at = now() WHERE name = ANY(%s)")
        try:
            with self.metis.pool.connection() as conn:
                conn.execute(statement, (list(bases),))
        except (MetisError, psycopg.Error) as exc:  # never ends the watch
            log.warning("watch: heartbeat not written (%s)", exc)

    def _caught_up(self, base: str) -> None:
        try:
            with self.metis.pool.connection() as conn:
                conn.execute("UPDATE bases SET caught_up_at = now(), watched_at = now() WHERE name = %s", (base,))
        except (MetisError, psycopg.Error) as exc:
            log.warning("watch: caught_up_at of %r not written (%s)", base, exc)


class _Poll:
    """Polls the files a base reads under `roots` every `delay_ms`, in the place of watchfiles' ``RustNotify``.

    watchfiles (1.3.0, the newest) polls through notify 8.0.0, whose ``PollWatcher`` kept a file's
    modification time in whole seconds and reported a change only when that number grew: a file
    written again within the second the poller had last dated it (a save just after the watch's
    first scan, or after the poll that saw the save before it) was not reported, nor indexed until
    the folder changed again. notify compares nanoseconds after its 8.2.0 (notify-rs/notify#981), in
    no release of watchfiles, which has no option for it (nor for notify's ``compare_contents``).
    Here a file changed when its modification time (ns), size or inode did: only two writes of one
    size within one tick of the kernel's file clock (1-10 ms) look alike. Like the indexer, it skips
    hidden names and symbolic links to folders, and files of kinds metis does not read.

    Costs one walk and a ``stat`` per file per poll in Python: 20-26 ms for 5,000 files at load 6
    (notify's walk in Rust: 6 ms), about 8 % of a core at the default 300 ms while the folders are polled.

    Raises:
        FileNotFoundError: a folder of `roots` is not there (as ``RustNotify``).
    """

    def __init__(self, roots: Iterable[Path], delay_ms: int) -> None:
        self.roots = sorted(roots)
        for root in self.roots:
            if not root.is_dir():
                raise FileNotFoundError(f"No path was found: {root}")
        self.delay_s = delay_ms / 1000
        self.seen = self._scan()

    def __enter__(self) -> "_Poll":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _scan(self) -> dict[str, tuple[int, int, int]]:
        """{path: (st_mtime_ns, st_size, st_ino)} of the files (a name that is not UTF-8 as os.walk gives it)."""
        seen: dict[str, tuple[int, int, int]] = {}
        for root in self.roots:
            for folder, folders, names in os.walk(root):
                folders[:] = [f for f in folders if not f.startswith(".")]
                for name in names:
                    if not name.startswith(".") and kind_of(name) is not None:
                        path = os.path.join(folder, name)
                        with contextlib.suppress(OSError):  # gone since the folder was listed
                            st = os.stat(path)
                            seen[path] = (st.st_mtime_ns, st.st_size, st.st_ino)
        return seen

    def watch(self, debounce_ms: int, step_ms: int, timeout_ms: int,
              stop_event: threading.Event) -> set[tuple[int, str]] | str:
        """What ``RustNotify.watch`` answers: the set of (change, path), once no new one came for
        `step_ms` or `debounce_ms` after the first; "timeout" after `timeout_ms` with none; "stop"."""
        from watchfiles import Change

        changes: set[tuple[int, str]] = set()
        start = first = last = time.monotonic()
        while not stop_event.wait(self.delay_s):
            before, self.seen = self.seen, self._scan()
            now = time.monotonic()
            new = ({(Change.added.value, p) for p in self.seen.keys() - before.keys()}
                   | {(Change.deleted.value, p) for p in before.keys() - self.seen.keys()}
                   | {(Change.modified.value, p) for p in self.seen.keys() & before.keys() if self.seen[p] != before[p]})
            if not new <= changes:
                first, last = (first if changes else now), now
                changes |= new
            if changes and (now - last >= step_ms / 1000 or now - first >= debounce_ms / 1000):
                return changes
            if not changes and now - start >= timeout_ms / 1000:
                return "timeout"
        return "stop"


def _relevant(change: object, path: str) -> bool:
    """watchfiles filter: outside hidden files and folders (``.git``, editors' ``.swp``), a file
    metis reads, a folder, or anything deleted or moved away (a folder gone is no longer a folder)."""
    import watchfiles

    if any(p.startswith(".") for p in Path(path).parts[1:]):
        return False
    return kind_of(path) is not None or change == watchfiles.Change.deleted or Path(path).is_dir()


def resolve_targets(metis: Metis, base: str | None, paths: Sequence[Path]) -> list[Watched]:
    """The folder sources ``metis watch PATHS --base B`` follows.

    With PATHS: each must be a folder source of a base (of `base` when given); a folder that is
    not one yet is indexed into `base` first. Without: every folder source of `base`, or of every base.

    Raises:
        InvalidInput: a path is not a folder, or PATHS without --base name folders no base holds.
        BaseNotFound: `base` does not exist (and no PATHS to create it from).
    """
    if not paths:
        return Watcher.targets_of(metis, [base] if base else None)
    targets: list[Watched] = []
    known = Watcher.targets_of(metis, [base] if base else None) if (base is None or base in metis.base_names()) else []
    for p in paths:
        root = Path(p).resolve()
        if not root.is_dir():
            raise InvalidInput(f"{p}: not a folder (metis watch follows folders)")
        mine = [t for t in known if t.root == root]
        if not mine:
            if base is None:
                raise InvalidInput(f"{p}: no base indexes this folder: name one with --base B (it is indexed first)")
            metis.index(base, root)
            mine = [t for t in Watcher.targets_of(metis, [base]) if t.root == root]
        targets.extend(mine)
    if base is not None and not targets:
        raise BaseNotFound(f"no base named {base!r}")
    return targets
