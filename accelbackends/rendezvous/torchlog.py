"""torch's C++ log level: the one place accelbackends sets ``TORCH_CPP_LOG_LEVEL``.

torch prints a ``[W… socket.cpp]`` warning, with C++ stack frames, for every store connection
retry and start-up failure; the errors of the rendezvous explain the same in words. torch reads
the variable once, when it is imported, so it is set before that, and a level the user set
always wins. A library call keeps torch's errors (``ERROR``); the command line, which reports
every failure itself, keeps only fatal ones unless ``--verbose``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

__all__ = ["LIBRARY", "QUIET", "TORCH_CPP_LOG_LEVEL", "quiet_torch_logs"]

TORCH_CPP_LOG_LEVEL = "TORCH_CPP_LOG_LEVEL"
#: The level for library use (``init()``) and for the ranks the testing kit starts.
LIBRARY = "ERROR"
#: The level for the command line.
QUIET = "FATAL"


def quiet_torch_logs(level: str = LIBRARY, env: MutableMapping[str, str] | None = None) -> None:
    """Set torch's C++ log level to ``level`` in ``env`` unless one is set there already.

    Without ``env``, in this process's environment, and only while torch is not imported yet
    (later it would change nothing for this process, and only surprise its children).
    """
    if env is None:
        if "torch" in sys.modules:
            return
        env = os.environ
    env.setdefault(TORCH_CPP_LOG_LEVEL, level)
