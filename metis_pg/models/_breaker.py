"""A circuit breaker for one model client: after N failures in a row, skip the model for a while.

Why our own class and not a library: PyPI ``pybreaker`` (1.4) holds one lock
for the whole guarded call (``CircuitBreaker.call`` runs the function inside
``with self._lock``), so the concurrent searches sharing a client would queue
behind one another — with a hanging model, each behind the others' timeouts —
and its half-open state lets every waiting call through, not one trial.
``circuitbreaker`` (2.1) keeps its state without any lock and also lets every
call through when half-open. The rule here is small enough to read whole.

States: *closed* (calls go through; consecutive failures are counted, a
success resets the count), *open* (after ``failures`` failures in a row: every
call fails at once, for ``cooldown_s`` seconds), *half-open* (the cool-down
passed: ONE trial call goes through, the others still fail at once; its
success closes the breaker, its failure opens it for another cool-down).
"""

from __future__ import annotations

import math
import threading
import time
from typing import Callable, TypeVar

from ..errors import ModelUnavailable

__all__ = ["CircuitBreaker"]

T = TypeVar("T")


class CircuitBreaker:
    """Counts a model client's consecutive failures and skips the model while they say it is down.

    Thread-safe: the state changes under a lock; the guarded call itself runs
    outside it, so concurrent calls are never serialised.

    Args:
        error: the class raised for a skipped call (the client's own,
            :class:`~metis_pg.errors.EmbeddingModelUnavailable` or
            :class:`~metis_pg.errors.RerankerUnavailable`).
        label: start of the message, e.g. ``"embedding model 'x' at http://h/v1/embeddings"``.
        failures: consecutive failures that open the breaker (at least 1).
        cooldown_s: seconds the model is skipped once open (0: a trial at the next call).
        clock: seconds, monotonic (tests may pass their own).

    A skipped call raises ``error`` with the message::

        embedding model 'x' at http://h/v1/embeddings: skipped for 27 s after 3 failures (last: no answer within 10.0 s)
    """

    def __init__(
        self,
        error: type[ModelUnavailable],
        label: str,
        *,
        failures: int,
        cooldown_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failures < 1:
            raise ValueError("failures must be at least 1")
        if cooldown_s < 0:
            raise ValueError("cooldown_s must not be negative")
        self.error, self.label = error, label
        self.failures, self.cooldown_s = failures, cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._count = 0  # consecutive failures
        self._last = ""  # what the last failure said, without the label
        self._open_until: float | None = None  # set while open or half-open
        self._trial = False  # a half-open trial call is under way

    @property
    def state(self) -> str:
        """``"closed"``, ``"open"`` or ``"half-open"`` (the cool-down has passed)."""
        with self._lock:
            if self._open_until is None:
                return "closed"
            return "open" if self._clock() < self._open_until else "half-open"

    def call(self, fn: Callable[[], T]) -> T:
        """Return ``fn()`` if the breaker lets the call through, recording how it went.

        A :class:`~metis_pg.errors.ModelUnavailable` raised by ``fn`` counts as
        a failure and is re-raised (one for a refusal, an HTTP 4xx but 408 and 429, counts as
        an answer: the model is up, and bisecting a batch down to the text it refuses must
        not open the breaker); any other exception passes through without
        counting either way.

        Raises:
            ModelUnavailable: ``self.error`` at once when the model is being
                skipped; else whatever ``fn`` raised.
        """
        trial = self._admit()
        try:
            result = fn()
        except ModelUnavailable as exc:
            if _refused(exc):  # the model answered (HTTP 4xx): it is up, the request was wrong
                self._succeeded()
            else:
                self._failed(exc, trial)
            raise
        except BaseException:
            if trial:
                with self._lock:
                    self._trial = False
            raise
        self._succeeded()
        return result

    def _admit(self) -> bool:
        """Let a call through or raise; return whether it is the half-open trial."""
        with self._lock:
            if self._open_until is None:
                return False
            left = self._open_until - self._clock()
            if left > 0:
                raise self.error(
                    f"{self.label}: skipped for {math.ceil(left)} s after {self._count} failures (last: {self._last})"
                )
            if self._trial:
                raise self.error(
                    f"{self.label}: skipped while a trial call is under way, after {self._count} failures (last: {self._last})"
                )
            self._trial = True
            return True

    def _failed(self, exc: ModelUnavailable, trial: bool) -> None:
        last = exc.message.removeprefix(self.label + ": ")
        with self._lock:
            self._count += 1
            self._last = last
            if trial:
                self._trial = False
            if trial or self._count >= self.failures:
                self._open_until = self._clock() + self.cooldown_s

    def _succeeded(self) -> None:
        with self._lock:
            self._count = 0
            self._last = ""
            self._open_until = None
            self._trial = False


def _refused(exc: BaseException) -> bool:
    """True when `exc` says the model answered with an HTTP 4xx but 408 and 429 (a refusal, not an outage)."""
    status = getattr(exc.__cause__, "status", None)
    return isinstance(status, int) and 400 <= status < 500 and status not in (408, 429)
