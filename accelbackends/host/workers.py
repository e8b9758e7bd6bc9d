"""torch's backend worker threads at the end of a process: wait, with the GIL free, until none is
running, before the interpreter finalises.

A Gloo process group runs its collectives on worker threads of its own (``pt_gloo_runloop``).
When a collective completes, the waiting caller goes on at once, while the worker still releases
the collective's tensors. Releasing a tensor whose Python object was dropped first needs the
GIL; a thread that asks for the GIL once the interpreter has begun to finalise is ended by
CPython inside torch's C++ destructor, and the C++ runtime aborts the whole process ("terminate
called without an active exception", exit 134 or -6) after the script's work was done (torch
2.13 on CPU; a core dump showed a worker in ``~AsyncAllgatherWork``). A framework's DDP wrapper or
engine keeps the group, and so the workers, alive past ``destroy_process_group()``, so tearing the
group down does not remove them either.

`wait_until_idle` closes that window from outside torch: it sleeps in short steps (which frees the
GIL, so a worker waiting for it gets it and finishes) until every worker has been asleep in two
checks in a row, reading the threads' states from ``/proc/self/task``. `at_exit` registers it to
run at interpreter exit, after a garbage collection, while the interpreter is still whole. On a
system without ``/proc`` it frees the GIL for one fixed pause instead.

Internal, outside the plugin SDK's stability promise (like `guard`).
"""

from __future__ import annotations

import atexit
import gc
import os
import threading
import time

__all__ = ["at_exit", "busy_worker_threads", "wait_until_idle"]

#: torch names the Gloo workers so (2.13 and 2.15 do; 2.4 leaves them the process's name).
GLOO_WORKER_NAME = "pt_gloo_runloop"
#: How long one step frees the GIL, and how many quiet steps in a row end the wait.
STEP_S = 0.01
QUIET_STEPS = 2
#: The most the wait costs a process whose native threads never settle (a busy library thread).
LIMIT_S = 1.0
_TASKS = "/proc/self/task"

_registered = False
_lock = threading.Lock()


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read()
    except OSError:  # the thread ended meanwhile
        return None


def _state(tid: str) -> str | None:
    """A thread's scheduler state letter (R running or runnable, S asleep, ...)."""
    stat = _read(f"{_TASKS}/{tid}/stat")
    if stat is None:
        return None
    # "tid (comm) state ...": comm may hold spaces and parentheses; the state follows the last ")"
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[0] if fields else None


def _worker_threads() -> list[str]:
    """The threads that may be torch's backend workers: those named as Gloo's workers where torch
    names them, otherwise every native thread Python's `threading` does not know."""
    try:
        tids = os.listdir(_TASKS)
    except OSError:
        return []
    named = [
        tid for tid in tids if (_read(f"{_TASKS}/{tid}/comm") or "").strip() == GLOO_WORKER_NAME
    ]
    if named:
        return named
    python = {thread.native_id for thread in threading.enumerate()}
    python.add(threading.get_native_id())
    return [tid for tid in tids if tid.isdigit() and int(tid) not in python]


def busy_worker_threads() -> list[str]:
    """The worker threads (see `_worker_threads`) that are running or waiting to run now."""
    return [tid for tid in _worker_threads() if _state(tid) == "R"]


def wait_until_idle(limit_s: float = LIMIT_S) -> bool:
    """Free the GIL in short steps until no worker thread has run in `QUIET_STEPS` checks in a
    row, or `limit_s` passed; True when they settled."""
    if not os.path.isdir(_TASKS):
        time.sleep(STEP_S * QUIET_STEPS)
        return True
    deadline = time.monotonic() + limit_s
    quiet = 0
    while quiet < QUIET_STEPS:
        time.sleep(STEP_S)  # a worker waiting for the GIL takes it now
        quiet = 0 if busy_worker_threads() else quiet + 1
        if quiet < QUIET_STEPS and time.monotonic() >= deadline:
            return False
    return True


def _settle_at_exit() -> None:
    # Unreachable DDP wrappers and engines release their groups while the interpreter is whole.
    gc.collect()
    wait_until_idle()


def at_exit() -> None:
    """Register, once per process, the wait that runs at interpreter exit."""
    global _registered
    with _lock:
        if not _registered:
            atexit.register(_settle_at_exit)
            _registered = True
