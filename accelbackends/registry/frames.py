"""Tracebacks and warnings that point at the user's code and the plugin's, not at the
machinery between them: pluggy's hook-calling frames are cut from errors raised through hooks,
and warnings name the caller's line instead of a line inside accelbackends."""

from __future__ import annotations

import itertools
import os
import sys
from types import FrameType
from typing import TypeVar

import pluggy

__all__ = ["caller_stacklevel", "without_pluggy_frames"]

_E = TypeVar("_E", bound=BaseException)
_PLUGGY = os.path.dirname(os.path.abspath(pluggy.__file__)) + os.sep
# The package, not this folder: a warning names the first frame outside all of accelbackends.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def without_pluggy_frames(exc: _E) -> _E:
    """``exc`` with the frames of pluggy's hook calling removed from its traceback (six of
    them between the facade and the plugin's function, which say nothing to the user)."""
    kept = []
    entry = exc.__traceback__
    while entry is not None:
        if not os.path.abspath(entry.tb_frame.f_code.co_filename).startswith(_PLUGGY):
            kept.append(entry)
        entry = entry.tb_next
    for before, after in itertools.pairwise(kept):
        before.tb_next = after
    if kept:
        kept[-1].tb_next = None
    return exc.with_traceback(kept[0] if kept else None)


def caller_stacklevel() -> int:
    """The ``stacklevel`` for `warnings.warn` that names the first frame outside
    accelbackends (and pluggy): the user's line that led to the warning."""
    level = 1
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith((_PACKAGE, _PLUGGY)):
            return level
        frame = frame.f_back
        level += 1
    return level
