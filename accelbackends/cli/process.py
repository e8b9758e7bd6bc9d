"""What the command line does so that a plugin cannot spoil its output or its exit.

A plugin may print at import (to ``sys.stdout`` or straight to file descriptor 1) and may start a
thread that never ends. With ``--json`` the report goes to a duplicate of the original stdout,
while descriptor 1 and ``sys.stdout`` point at stderr for everybody else: whatever a plugin (or a
C library under it) prints lands on stderr, never in front of the JSON. At exit the command does
not wait for threads it did not start, nor for a plugin call it gave up on, and does not let a
thread still inside torch abort the interpreter's shutdown.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from ..host import guard
from . import text

__all__ = ["exit", "keep_plugin_output_off_stdout"]


def keep_plugin_output_off_stdout(enabled: bool) -> Callable[[], None]:
    """Send ``say`` to stdout and everything else written to
    stdout to stderr, until the returned function is called. Does nothing unless ``enabled``
    and ``sys.stdout`` is descriptor 1 (an in-process caller that captures stdout keeps it)."""
    try:
        on_descriptor_1 = sys.stdout.fileno() == 1
    except (AttributeError, OSError, ValueError):
        on_descriptor_1 = False
    if not enabled or not on_descriptor_1:
        return lambda: None
    stdout = sys.stdout
    stdout.flush()
    saved = os.dup(1)
    report = open(  # noqa: SIM115 - closed by the returned function
        saved, "w", encoding=stdout.encoding, errors=stdout.errors, closefd=False
    )
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    text.report_to(report)

    def restore() -> None:
        text.report_to(None)
        with contextlib.suppress(BrokenPipeError):
            report.flush()
        sys.stdout = stdout
        os.dup2(saved, 1)
        os.close(saved)

    return restore


def exit(code: int) -> NoReturn:
    """Exit with ``code``, skipping the interpreter's shutdown whenever another thread is still
    running: the exit policy of `accelbackends.host.guard.leave`, which says why."""
    guard.leave(code)
