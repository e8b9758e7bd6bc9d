"""The watchdog: ends a rank whose step outlives its limit, so that no run hangs."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Callable

__all__ = ["GRACE", "Watchdog"]

#: The watchdog stops a rank whose step outlives ``--timeout`` by half as much again (2 to 10 s):
#: the backend's own collective timeout, whose message says more, gets the first chance.
GRACE = (2.0, 10.0)


class Watchdog:
    """Ends this rank when a step outlives ``timeout`` plus the grace, so that no run hangs.

    One line on stderr names the rank and the step, then the process exits with status 1;
    spawn() or the launcher then stops the other ranks.
    """

    def __init__(
        self,
        rank: int,
        timeout: float,
        *,
        explain: Callable[[], str] | None = None,
        on_expire: Callable[[str], None] | None = None,
        announce: bool = True,
    ) -> None:
        """``explain`` may name the rank to blame (see `.heartbeat`); ``on_expire`` gets
        the message before this rank exits (rank 0 keeps the report so far); ``announce``
        False leaves printing it to the process that reports (spawn()'s parent)."""
        low, high = GRACE
        self._explain, self._on_expire, self._announce = explain, on_expire, announce
        self._rank = rank
        self._timeout, self._grace = timeout, min(high, max(low, timeout / 2))
        self._limit = self._timeout + self._grace
        self._step: str | None = None
        self._deadline = math.inf
        self._stopped = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._watch, name="check-watchdog", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        with self._cond:
            while not self._stopped:
                remaining = self._deadline - time.monotonic()
                if remaining <= 0:
                    self._expire()
                self._cond.wait(None if remaining == math.inf else remaining)

    def _expire(self) -> None:
        message = (
            f"rank {self._rank}: {self._step} did not finish within {self._limit:g} s "
            f"(--timeout {self._timeout:g} plus {self._grace:g} s); stopping this rank"
        )
        try:
            blame = self._explain() if self._explain else ""
        except Exception:
            blame = ""
        if blame:
            message = f"{blame} (rank {self._rank} gave up on {self._step} after {self._limit:g} s)"
        if self._announce:
            print(f"accelbackends: error: {message}", file=sys.stderr, flush=True)
        if self._on_expire is not None:
            with contextlib.suppress(Exception):  # exiting is what matters now
                self._on_expire(message)
        os._exit(1)

    def _arm(self, step: str | None) -> None:
        with self._cond:
            self._step = step
            self._deadline = math.inf if step is None else time.monotonic() + self._limit
            self._cond.notify()

    def step(self, name: str) -> _Step:
        """A context manager: the step ``name`` must finish within the limit."""
        return _Step(self, name)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join()


class _Step:
    def __init__(self, watchdog: Watchdog, name: str) -> None:
        self._watchdog, self._name = watchdog, name

    def __enter__(self) -> None:
        self._watchdog._arm(self._name)

    def __exit__(self, *exc: object) -> None:
        self._watchdog._arm(None)
