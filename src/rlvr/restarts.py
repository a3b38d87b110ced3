"""Bounded, logged restarts of a helper process that rollouts depend on (vf-alfworld's TextWorldExpress JVM, the
sandbox server, the math-verify worker): each restart is one log line naming the process and what happened to it,
and at most `limit` restarts happen within any `window_s` seconds, so a process that dies at every start fails the
calls that need it (each one a failed rollout) instead of being restarted forever. A rate, not a total: a run of
many hours may lose its JVM a few times (docs/architecture.md, "Faults and what a run does").
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

logger = logging.getLogger(__name__)


class RestartsSpent(RuntimeError):
    """The process failed again after `limit` restarts within the window; the message says which and why."""


class RestartBudget:
    """Restarts of one process: `spend(why)` logs the restart, or raises RestartsSpent when the budget is spent."""

    def __init__(self, what: str, limit: int = 3, window_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic):  # fmt: skip
        if not isinstance(limit, int) or limit < 0:
            raise ValueError(f"RestartBudget: limit={limit!r} must be a whole number >= 0")
        if not window_s > 0:
            raise ValueError(f"RestartBudget: window_s={window_s!r} must be > 0 seconds")
        self.what = what
        self.limit = limit
        self.window_s = window_s
        self._clock = clock
        self._times: deque[float] = deque()
        self._lock = threading.Lock()
        self.restarts = 0  # in all, for the record

    def spend(self, why: str) -> None:
        """Account one restart of the process after `why` ("died (exit code -9)", ...)."""
        with self._lock:
            now = self._clock()
            while self._times and now - self._times[0] >= self.window_s:
                self._times.popleft()
            if len(self._times) >= self.limit:
                raise RestartsSpent(
                    f"{self.what} {why}, and was restarted {self.limit} times in the last {self.window_s:g} s: not "
                    "restarting it again now (its calls fail until the window passes)"
                )
            self._times.append(now)
            self.restarts += 1
            logger.warning(f"{self.what} {why}: restarting it (restart {len(self._times)} of {self.limit} within "
                           f"{self.window_s:g} s)")
