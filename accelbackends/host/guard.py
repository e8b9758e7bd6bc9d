"""Not part of the plugin layer's stability promise: used by the package itself.

The one runner for foreign or blocking code with a deadline, and the record of what it
gave up on.

Foreign code (a third-party plugin's import, declaration, probe or hook; the C library's name
look-up) runs here, in a daemon thread of its own, waited for up to a limit (`bounded`, `Call`).
Whatever it raises comes back to the caller, ``SystemExit`` and ``KeyboardInterrupt`` included
(raised by plugin code in a thread they are the plugin's doing, never the user's Ctrl-C, which
reaches the main thread). A call that has not returned by the limit is given up on and recorded;
so is any other thread of ours that could not be joined in time (`give_up`: check's heartbeat).
Three readers use the record:

- ``spawn()`` does not fork while a recorded thread runs (`stuck`): it may hold an import lock or
  a driver library's lock, which a forked child would inherit locked;
- the exit of a process accelbackends owns (the command line, a ``spawn()`` rank) skips the
  interpreter's shutdown while any thread still runs (`leave`): on CPython 3.10-3.13 a daemon
  thread whose native call returns during the shutdown is ended from inside that call, and in
  torch's C++ that aborts the process ("terminate called without an active exception", status
  134 instead of the caller's);
- tests, which wait until nothing is recorded.

Policy for library calls (``init()``, ``select()``, ``attach()``), whose process and exit status
belong to the user: no thread of ours is left inside torch when they return or raise. The store
code runs torch on the calling thread only, after a pure-Python exchange has shown that the peer
is a live store (`rendezvous.storewire`), so it has nothing to give up on. What this runner can
still give up on is foreign code: a plugin call past ``ACCELBACKENDS_PLUGIN_TIMEOUT``, a name
look-up past its limit. It stays recorded and keeps running as a daemon; it cannot be joined (it
does not return), and an ``atexit`` hook that ``os._exit``-ed could not know the status the user's
``sys.exit`` asked for, so none is installed. The cost, said in docs/troubleshooting.md: a plugin
call that hangs inside C++ and returns just while the user's interpreter shuts down can still
abort it; one that hangs in Python code, or never returns, cannot.

Why threads and not a probe subprocess, as conda does for CUDA: a child interpreter that loads
the plugins and runs detection costs 0.3 to 0.5 s on every ``info``, ``select()`` and ``init()``
(see benchmarks/README.md), where a thread costs about 0.1 ms; a plugin that hangs is rare, and
what a stuck thread could still break, a fork or an exit, is guarded here.

A thread's deadline holds only while the waiting thread can take the GIL back. A third-party call
that spins in C code holding the GIL (a C extension's busy loop) stops every other thread, the
waiting one and the SIGTERM watchdog of `accelbackends.cli.sigterm` included. In a process
accelbackends owns (the command line, `own_process`), such a call therefore also runs under two
bounds that need no GIL (`held_bound`): faulthandler's C watchdog ends the process with status 1
at the limit plus `GIL_GRACE_S` (the waiting thread, once it has the GIL, disarms it first), and
SIGTERM has its default action, so that it ends the process at once. The call's thread runs
under a frame named after the message, which faulthandler's traceback prints: faulthandler writes
only a traceback, and nothing else can write while the GIL is held. In a user's process (library
calls) neither is done: its signal handlers and faulthandler belong to the user.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from types import CodeType, FrameType
from typing import Any, Generic, NoReturn, TypeVar

from ..plugin.errors import describe

__all__ = [
    "Call",
    "PluginExit",
    "PluginTimeout",
    "bounded",
    "failure",
    "give_up",
    "held_bound",
    "leave",
    "own_process",
    "stuck",
]

#: Seconds past its limit that a third-party call holding the GIL gets before the process ends.
GIL_GRACE_S = 2.0

_T = TypeVar("_T")

#: Threads given up on, as (what, thread); pruned of the finished ones by ``stuck``.
_abandoned: list[tuple[str, threading.Thread]] = []
_lock = threading.Lock()
#: Whether this process is accelbackends' own (`own_process`); whether a `held_bound` is armed.
_owned = False
_armed = False


class PluginExit(Exception):
    """A plugin's call raised ``SystemExit``, ``KeyboardInterrupt`` or another exception that
    is not an ``Exception``; carried as an ordinary one so that it stops nothing but the plugin."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(describe(original))
        self.original = original


class PluginTimeout(Exception):
    """A plugin's call did not return within ``limit`` seconds (it may still be running)."""

    def __init__(self, what: str, limit: float, call: Call[Any]) -> None:
        super().__init__(f"{what} did not return within {limit:g} s")
        self.limit = limit
        self.call = call


def failure(exc: BaseException) -> str:
    """``Type: message`` of what a plugin raised, seen through ``PluginExit``; a
    ``PluginTimeout`` as its message."""
    if isinstance(exc, PluginTimeout):
        return str(exc)
    return describe(exc.original if isinstance(exc, PluginExit) else exc)


class Call(Generic[_T]):
    """``function()`` running in a daemon thread named after ``what``. ``foreign`` names the
    third-party code it runs ("plugin 'x''s import"): what a `held_bound` says of it."""

    def __init__(
        self, function: Callable[[], _T], what: str, foreign: str | None = None, limit: float = 0
    ) -> None:
        self.what = what
        self._value: _T | None = None
        self._error: BaseException | None = None
        if foreign is not None:
            function = _named(_held_message(foreign, limit), function)
        self._thread = threading.Thread(
            target=self._run, args=(function,), name=f"accelbackends: {what}", daemon=True
        )
        self._thread.start()

    def _run(self, function: Callable[[], _T]) -> None:
        try:
            self._value = function()
        except BaseException as exc:  # the plugin's SystemExit is a failure of the plugin only
            self._error = exc

    def wait(self, timeout: float) -> bool:
        """True once the call has finished; waits at most ``timeout`` seconds."""
        self._thread.join(max(0.0, timeout))
        return not self._thread.is_alive()

    def result(self) -> _T:
        """The call's value, or what it raised (``PluginExit`` for a non-``Exception``)."""
        if self._error is not None:
            if isinstance(self._error, Exception):
                raise self._error
            raise PluginExit(self._error) from self._error
        return self._value  # type: ignore[return-value]

    def abandon(self) -> None:
        """Give up on the call: it keeps running, as a daemon, and ``stuck`` names it."""
        give_up(self.what, self._thread)

    def where(self, codes: dict[CodeType, str]) -> str | None:
        """The innermost of ``codes`` (code object → name) the still-running call is in."""
        frame: FrameType | None = sys._current_frames().get(self._thread.ident or -1)
        while frame is not None:
            if frame.f_code in codes:
                return codes[frame.f_code]
            frame = frame.f_back
        return None


def bounded(function: Callable[[], _T], limit: float, what: str, foreign: str | None = None) -> _T:
    """``function()``'s value, or what it raised; ``PluginTimeout`` after ``limit``
    seconds, leaving the call running and recorded. ``foreign`` (see `Call`): third-party
    code, also bounded while it holds the GIL (`held_bound`)."""
    call = Call(function, what, foreign, limit)
    with held_bound(limit, foreign is not None):
        finished = call.wait(limit)
    if not finished:
        call.abandon()
        raise PluginTimeout(what, limit, call)
    return call.result()


def own_process() -> None:
    """This process is accelbackends' own (the command line): `held_bound` arms its bounds."""
    global _owned
    _owned = True


def _held_message(foreign: str, limit: float) -> str:
    return (
        f"accelbackends: {foreign} did not return within {limit:g} s while holding the GIL; "
        "the process ends (exit 1)"
    )


def _named(name: str, function: Callable[[], _T]) -> Callable[[], _T]:
    """``function`` called from a frame whose function name is ``name`` (faulthandler prints it
    on every line of the call's traceback that is this frame)."""

    def call() -> _T:
        return function()

    call.__code__ = call.__code__.replace(co_name=name)
    return call


@contextlib.contextmanager
def held_bound(limit: float, foreign: bool = True) -> Iterator[None]:
    """While the block waits for ``foreign`` code in a process accelbackends owns, and from its
    main thread: the process ends (status 1, faulthandler's traceback on stderr) should the
    block still run ``GIL_GRACE_S`` past ``limit``, and SIGTERM ends it at once (its default
    action). Nothing is done when nested, elsewhere, or for the built-in plugins' code."""
    global _armed
    if (
        not foreign
        or not _owned
        or _armed
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return
    _armed = True
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    faulthandler.dump_traceback_later(limit + GIL_GRACE_S, exit=True, file=2)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        _armed = False


def give_up(what: str, thread: threading.Thread) -> None:
    """Record ``thread``, which its owner stopped waiting for while it still runs."""
    with _lock:
        _abandoned.append((what, thread))


def stuck() -> list[str]:
    """What each thread given up on, and still running, was doing."""
    with _lock:
        _abandoned[:] = [(what, thread) for what, thread in _abandoned if thread.is_alive()]
        return [what for what, _ in _abandoned]


def codes_of(functions: Iterable[tuple[object, str]]) -> dict[CodeType, str]:
    """Code object → plugin name, for ``where``."""
    found: dict[CodeType, str] = {}
    for function, name in functions:
        code = getattr(function, "__code__", None)
        if isinstance(code, CodeType):
            found[code] = name
    return found


def leave(code: int) -> NoReturn:
    """Exit a process accelbackends owns with ``code``, skipping the interpreter's shutdown
    whenever another thread still runs (one recorded here, or any other: a plugin's own thread).

    A non-daemon thread would keep the interpreter waiting forever; a daemon thread inside a
    native call can abort the shutdown (see the module's docstring). Standard output and error
    are flushed first; only atexit callbacks and finalisers are skipped."""
    main = threading.main_thread()
    if stuck() or any(t is not main and t.is_alive() for t in threading.enumerate()):
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                stream.flush()
        os._exit(code)
    sys.exit(code)
