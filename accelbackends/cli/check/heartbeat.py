"""Which rank stopped answering: every rank bumps a counter in the rendezvous store each second
from a thread of its own; rank 0 watches the counters. A rank stopped by a signal (SIGSTOP), or
whose interpreter is frozen, stops counting, while one merely waiting inside a collective (the
GIL released) goes on; so when a step times out, rank 0 names the rank that went silent instead
of blaming itself or the survivor."""

from __future__ import annotations

import threading
import time
from typing import Any

from ...host import guard

__all__ = ["Heartbeat"]

#: How often each rank bumps its counter, and how long a silent counter takes to count as stopped.
INTERVAL = 1.0
SILENT_AFTER = 3.0
#: How long ``stop`` waits for a store call in flight: a round trip to a live store takes
#: milliseconds, and one to a store that is gone fails as soon as its connection breaks.
STOP_WAIT = 5.0
_KEY = "accelbackends/check/alive/"


class Heartbeat:
    """Counts for this rank; on rank 0 also notes when each rank's counter last moved."""

    def __init__(self, store: Any, rank: int, world_size: int) -> None:
        self._store, self._rank, self._world = store, rank, world_size
        self._seen: dict[int, tuple[int, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if store is not None:
            self._thread = threading.Thread(target=self._run, name="check-heartbeat", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL):
            try:
                self._store.add(f"{_KEY}{self._rank}", 1)
                if self._rank == 0:
                    self._watch()
            except Exception:
                return  # the store is gone: the run is ending, and the step's error says why

    def _watch(self) -> None:
        now = time.monotonic()
        for rank in range(1, self._world):
            count = int(self._store.add(f"{_KEY}{rank}", 0))
            with self._lock:
                last = self._seen.get(rank)
                if last is None or last[0] != count:
                    self._seen[rank] = (count, now)

    def silent(self) -> dict[int, float]:
        """On rank 0: the ranks whose counter has not moved for `SILENT_AFTER` seconds,
        with how long (empty elsewhere, or before the first look)."""
        now = time.monotonic()
        with self._lock:
            return {
                rank: now - since
                for rank, (_, since) in sorted(self._seen.items())
                if now - since >= SILENT_AFTER
            }

    def explain(self) -> str:
        """`` rank 1 stopped answering (silent for 12 s: stopped or frozen)`` or ``""``."""
        silent = self.silent()
        if not silent:
            return ""
        names = ", ".join(
            f"{rank} (silent for {seconds:.0f} s)" for rank, seconds in silent.items()
        )
        which = "rank" if len(silent) == 1 else "ranks"
        return (
            f"{which} {names} stopped answering: stopped by a signal (SIGSTOP, Ctrl-Z), "
            "frozen, swapped out or gone; the other ranks were waiting for it"
        )

    def stop(self) -> None:
        """End the thread and wait for it (at most `STOP_WAIT`): a daemon thread left inside a
        store call would abort the interpreter's shutdown when the call returns (CPython
        3.10-3.13), in a ``spawn()`` rank or a ``check`` rank alike. One that still has not
        returned is recorded in `accelbackends.host.guard`, whose exit skips that shutdown."""
        self._stop.set()
        if self._thread is None or self._thread is threading.current_thread():
            return
        self._thread.join(STOP_WAIT)
        if self._thread.is_alive():
            guard.give_up(f"check heartbeat of rank {self._rank} (a store call)", self._thread)
