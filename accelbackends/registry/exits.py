"""A third-party plugin that calls ``os._exit`` while it is imported is failed, not obeyed.

``os._exit`` ends the process at once, with no exception, no ``finally`` and no output: a plugin
calling it at import ended ``info`` and ``check`` with its exit code and nothing on the screen,
naming nothing. While a plugin module is imported, ``os._exit`` called from the
importing thread raises `ProcessExit` instead, which the registry records as that plugin's
failure; every other thread (the CLI's SIGTERM watchdog among them) still gets the real one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import NoReturn, TypeVar

__all__ = ["ProcessExit", "refusing_exit"]

_T = TypeVar("_T")
_lock = threading.Lock()
#: The threads importing a plugin now.
_importing: set[int] = set()
#: The real one, as this module found it.
_real_exit: Callable[[int], NoReturn] = os._exit


class ProcessExit(BaseException):
    """A plugin called ``os._exit`` while it was imported (a BaseException, so that the
    plugin's own ``except Exception`` does not swallow it)."""


def _exit(status: int) -> NoReturn:
    if threading.get_ident() in _importing:
        raise ProcessExit(
            f"the plugin called os._exit({status}) while it was imported (the process was kept "
            "from ending)"
        )
    _real_exit(status)


def refusing_exit(load: Callable[[], _T]) -> Callable[[], _T]:
    """``load`` run with ``os._exit`` refused in the thread that runs it."""

    def run() -> _T:
        ident = threading.get_ident()
        with _lock:
            if not _importing:
                os._exit = _exit
            _importing.add(ident)
        try:
            return load()
        finally:
            with _lock:
                _importing.discard(ident)
                if not _importing and os._exit is _exit:
                    os._exit = _real_exit  # type: ignore[assignment]

    return run
