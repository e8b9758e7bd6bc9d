"""SIGTERM that ends the command line within seconds, whatever the main thread is blocked in.

CPython runs a Python signal handler only between bytecodes of the main thread. While that
thread waits inside native code (a Gloo connect, a TCPStore wait: torch releases the GIL there
but does not return for minutes), the ``_Terminated`` handler of the CLI never runs, and a
launcher's SIGTERM (``scancel``, ``mpirun`` stopping a job, a Kubernetes pod deletion) is ignored
until the launcher escalates to SIGKILL.

The C-level part of CPython's signal handling still runs at once: it writes the signal number to
the *wakeup fd* (`signal.set_wakeup_fd`). A daemon thread blocked on that pipe wakes, gives
the Python handler ``grace`` seconds to take over (it calls `Watchdog.handled`, after which
the main thread's own cleanup runs unhurried), and otherwise prints the same line the handler
would and ends the process with `os._exit`: nothing of the main thread can be cleaned up
while it is stuck in native code, and a rank has nothing that outlives it (its store connection
and sockets close with the process).

An import is the one place where the Python handler must *not* raise: while torch or numpy run
their C extensions' initialisation, an exception thrown from a handler breaks it (an abort in
pybind11, "cannot load module more than once per process", or an exception swallowed by the
module's own fallback code, after which the command ran on as if no signal had come).
`ImportShield` holds the signal until the outermost import statement of the main thread has
returned and raises there; the watchdog still ends the process should that import never return.
"""

from __future__ import annotations

import builtins
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

__all__ = ["GRACE_S", "ImportShield", "Watchdog", "shield_imports", "watch_sigterm"]

#: How long the Python handler gets to start before the process is ended from the side thread.
GRACE_S = 3.0
_STOP = b"\0"  # not a signal number: tells the thread to end


class Watchdog:
    def __init__(self, grace: float, exit_code: int, message: str) -> None:
        self.grace = grace
        self.exit_code = exit_code
        self.message = message
        self._handled = threading.Event()

    def handled(self) -> None:
        """The Python handler ran: the main thread is responsive and cleans up itself."""
        self._handled.set()

    def _run(self, wakeup: int) -> None:
        # The kernel hands a process-directed signal to any thread that does not block it. Were
        # it this one, the main thread would sleep on (a sleep or select is cut short only in
        # the thread that took the signal), its handler would not run, and the grace would run
        # out on a responsive process: leave every signal to the other threads.
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        while True:
            try:
                data = os.read(wakeup, 64)
            except OSError:
                return
            # SIGTERM first: written by the signal before the block ended, it may be one whose
            # Python handler never ran (see watch_sigterm), and must still end the process.
            if signal.SIGTERM in data:
                break
            if not data or _STOP in data:
                return
        if self._handled.wait(self.grace):
            return
        try:
            sys.stderr.write(self.message + "\n")
            sys.stderr.flush()
        finally:
            os._exit(self.exit_code)


#: The pipes of the watches in force (read end, write end, the wakeup fd each replaced).
_watching: list[tuple[int, int, int]] = []


def _forget_watches_in_child() -> None:
    """A process forked inside `watch_sigterm` (a rank of spawn()) inherits the wakeup fd and
    its pipe, but not the thread reading it: a signal of the child's (the SIGTERM that ends a
    rank) would be written into the parent's pipe, and the parent's watchdog would take it for
    its own and end the parent. The child goes back to the wakeup fd before the watch."""
    while _watching:
        read_end, write_end, previous = _watching.pop()
        with suppress(ValueError, OSError):  # ValueError: forked from a thread other than main
            signal.set_wakeup_fd(previous)
        for fd in (read_end, write_end):
            with suppress(OSError):
                os.close(fd)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_watches_in_child)


@contextmanager
def watch_sigterm(
    exit_code: int, message: str, grace: float = GRACE_S
) -> Iterator[Watchdog | None]:
    """Within the block, a SIGTERM ends the process after ``grace`` seconds at the latest.

    Yields None (and does nothing) outside the main thread, where no wakeup fd can be set.
    """
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    watchdog = Watchdog(grace, exit_code, message)
    try:
        previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except ValueError:  # an embedding interpreter refused it; keep the plain handler
        os.close(read_end)
        os.close(write_end)
        yield None
        return
    thread = threading.Thread(
        target=watchdog._run, args=(read_end,), name="accelbackends-sigterm", daemon=True
    )
    thread.start()
    _watching.append((read_end, write_end, previous))
    try:
        yield watchdog
    finally:
        _watching.remove((read_end, write_end, previous))
        signal.set_wakeup_fd(previous)
        with suppress(OSError):
            os.write(write_end, _STOP)
        # Waited for until it has read everything the signals wrote: a SIGTERM that arrived
        # while the caller put back its previous handler was recorded here, but CPython drops
        # a signal whose Python handler is reset to the default before it runs (bpo-43406),
        # so the command would have returned its verdict, success included. The thread then
        # ends the process within the grace; otherwise it returns at once.
        thread.join(timeout=grace + 1)
        os.close(write_end)
        if not thread.is_alive():
            os.close(read_end)


class ImportShield:
    """Counts the main thread's import statements in progress; a signal that arrives during one
    is held (`hold`) and delivered by calling ``deliver`` once the outermost one has returned,
    when the module is complete and in ``sys.modules``."""

    def __init__(self, deliver: Callable[[], None]) -> None:
        self._deliver = deliver
        self._depth = 0
        self._pending = False
        self._main = threading.main_thread().ident
        self._import = builtins.__import__

    def hold(self) -> bool:
        """Called by the signal handler: True (and the signal kept for later) while the main
        thread is importing."""
        if self._depth:
            self._pending = True
            return True
        return False

    def __call__(self, name: str, *args: object, **kwargs: object) -> object:
        if threading.get_ident() != self._main:
            return self._import(name, *args, **kwargs)  # type: ignore[arg-type]
        self._depth += 1
        try:
            return self._import(name, *args, **kwargs)  # type: ignore[arg-type]
        finally:
            self._depth -= 1
            if not self._depth and self._pending:
                self._pending = False
                self._deliver()


@contextmanager
def shield_imports(deliver: Callable[[], None]) -> Iterator[ImportShield]:
    """Within the block, the main thread's imports hold a signal (see `ImportShield`)."""
    shield = ImportShield(deliver)
    previous = builtins.__import__
    builtins.__import__ = shield  # type: ignore[assignment]
    try:
        yield shield
    finally:
        builtins.__import__ = previous
