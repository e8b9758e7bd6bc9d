"""Calling a plugin's code so that it cannot take the host down with it.

Each call runs in a daemon thread of its own and is waited for up to a limit. Whatever it raises
comes back to the caller, ``SystemExit`` and ``KeyboardInterrupt`` included (raised by plugin
code in a thread they are the plugin's doing, never the user's Ctrl-C, which reaches the main
thread); one that has not returned by the limit is given up on, and remembered: a thread that
may hold an import lock or a driver library's lock must not be copied into a forked child, so
``spawn`` does not fork while one is still running (``stuck``).

Why threads and not a probe subprocess, as conda does for CUDA: a child interpreter that loads
the plugins and runs detection costs 0.3 to 0.5 s on every ``info``, ``select()`` and ``init()``
(see benchmarks/README.md), where a thread costs about 0.1 ms; a plugin that hangs is rare, and
the one thing a stuck thread could still break, a fork, is avoided.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from types import CodeType, FrameType
from typing import Any, Generic, TypeVar

from ..plugin.errors import describe

__all__ = ["Call", "PluginExit", "PluginTimeout", "bounded", "failure", "stuck"]

_T = TypeVar("_T")

#: Calls given up on, as (what, thread); pruned of the finished ones by ``stuck``.
_abandoned: list[tuple[str, threading.Thread]] = []
_lock = threading.Lock()


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
    """``function()`` running in a daemon thread named after ``what``."""

    def __init__(self, function: Callable[[], _T], what: str) -> None:
        self.what = what
        self._value: _T | None = None
        self._error: BaseException | None = None
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
        with _lock:
            _abandoned.append((self.what, self._thread))

    def where(self, codes: dict[CodeType, str]) -> str | None:
        """The innermost of ``codes`` (code object → name) the still-running call is in."""
        frame: FrameType | None = sys._current_frames().get(self._thread.ident or -1)
        while frame is not None:
            if frame.f_code in codes:
                return codes[frame.f_code]
            frame = frame.f_back
        return None


def bounded(function: Callable[[], _T], limit: float, what: str) -> _T:
    """``function()``'s value, or what it raised; ``PluginTimeout`` after ``limit``
    seconds, leaving the call running and recorded."""
    call = Call(function, what)
    if not call.wait(limit):
        call.abandon()
        raise PluginTimeout(what, limit, call)
    return call.result()


def stuck() -> list[str]:
    """What each plugin call given up on, and still running, was doing."""
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
