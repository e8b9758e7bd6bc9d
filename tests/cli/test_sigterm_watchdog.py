"""A SIGTERM the interpreter drops still ends the command: no success after the signal."""

from __future__ import annotations

import subprocess
import sys

#: The command's last moments, with the race forced: the signal arrives (CPython's C handler
#: writes its number to the wakeup fd) while the command's handler is installed, and the
#: handler is put back to the default before the Python handler could run, which CPython then
#: drops (bpo-43406); the command goes on to print its verdict and return 0.
_LOST_SIGNAL = """
import os, signal, sys
from accelbackends.cli.sigterm import watch_sigterm

def handler(signum, frame):
    raise SystemExit("the handler ran, so this run proves nothing")

with watch_sigterm(143, "accelbackends: terminated"):
    signal.signal(signal.SIGTERM, handler)
    wakeup = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup)
    os.write(wakeup, bytes([signal.SIGTERM]))  # what the signal's C handler writes
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the command puts back its previous handler
print("verdict: PASSED", flush=True)
sys.exit(0)
"""


def test_a_sigterm_whose_handler_never_ran_ends_the_command_with_143_not_its_verdict() -> None:
    """Before: the watchdog saw the signal but the block's end waited 1 s for it, less than its
    3 s grace, and the command exited 0 with its verdict (seen once in a SIGTERM sweep of
    ``check --nproc 2``)."""
    done = subprocess.run(
        [sys.executable, "-c", _LOST_SIGNAL], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 143, (done.returncode, done.stdout, done.stderr)
    assert "PASSED" not in done.stdout
    assert done.stderr.strip() == "accelbackends: terminated"


#: A rank forked while the command watches for SIGTERM, and ended by a SIGTERM of its own (as
#: spawn() ends a rank): the command is not the one signalled and goes on to its verdict.
_FORKED_RANK_SIGNALLED = """
import os, signal, sys
from accelbackends.cli.sigterm import watch_sigterm

with watch_sigterm(143, "accelbackends: terminated", grace=0.5):
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        signal.raise_signal(signal.SIGTERM)
        os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
print("verdict: PASSED", flush=True)
sys.exit(0)
"""


def test_a_sigterm_of_a_forked_rank_does_not_end_the_command() -> None:
    """Before: the rank inherited the command's wakeup fd and its pipe; its own SIGTERM was
    written there, and the command's watchdog ended the command with 143."""
    done = subprocess.run(
        [sys.executable, "-c", _FORKED_RANK_SIGNALLED], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert done.stdout.strip() == "verdict: PASSED"
