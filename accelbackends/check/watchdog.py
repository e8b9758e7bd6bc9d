"""The watchdog: ends a rank whose step outlives its limit, so that no run hangs."""

from __future__ import annotations

import math
import os
import sys
import threading
import time

__all__ = ["GRACE", "Watchdog"]

#: The watchdog stops a rank whose step outlives ``--timeout`` by half as much again (2 to 10 s):
#: the backend's own collective timeout, whose message says more, gets the first chance.
GRACE = (2.0, 10.0)


class Watchdog:
    """Ends this rank when a step outlives ``timeout`` plus the grace, so that no run hangs.

    One line on stderr names the rank and the step, then the process exits with status 1;
    spawn() or the launcher then stops the other ranks.
    """

    def __init__(self, rank: int, timeout: float) -> None:
        low, high = GRACE
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
                    print(
                        f"accelbackends: error: rank {self._rank}: {self._step} did not finish "
                        f"within {self._limit:g} s (--timeout {self._timeout:g} plus "
                        f"{self._grace:g} s); stopping this rank",
                        file=sys.stderr,
                        flush=True,
                    )
                    os._exit(1)
                self._cond.wait(None if remaining == math.inf else remaining)

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
