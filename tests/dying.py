"""A rank's death for the tests, imported by the ranks themselves (put this folder on their
PYTHONPATH): test code only."""

from __future__ import annotations

import faulthandler
import os
import signal
import time

#: How long the end of a rank that `die_slowly` reaches its parent after its sockets closed.
LATE = 3.0


def die_slowly(signum: int | None = signal.SIGSEGV, code: int = 3) -> None:
    """Die by ``signum`` (None: exit with ``code``) the way a rank holding a GPU does: its
    sockets close at once (its peers see "Connection closed by peer" and report), but its end
    reaches spawn()'s parent `LATE` seconds later (a CUDA context's teardown runs between the
    two). Here a helper closes its copies of the sockets and keeps the rank's other
    descriptors, its exit pipe among them, that much longer; spawn() ends the helper with the
    rank's process group."""
    faulthandler.disable()  # pytest's, inherited by a forked rank: no traceback of the crash
    if os.fork() == 0:
        for name in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                    os.close(int(name))
            except OSError:
                pass
        time.sleep(LATE)
        os._exit(0)
    if signum is None:
        os._exit(code)
    os.kill(os.getpid(), signum)
