"""The command's exit: its own status, whatever thread is still running when it ends.

CI once saw ``accelbackends check`` end with SIGABRT ("terminate called without an active
exception") instead of 143 after a SIGTERM: the rank's store-connect thread (a daemon) was still
inside torch's TCPStore constructor when the CLI returned, and its C++ call came back while the
interpreter shut down. CPython then ends such a thread from inside torch's frames, which aborts the
whole process. The script below makes that timing certain instead of rare: a daemon thread waits
in a torch store call, and the interpreter's last flush of stdout (which runs after CPython has
started shutting down) releases it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from accelbackends.testing.cluster import clean_environment

_SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    from datetime import timedelta

    import torch.distributed as dist

    from accelbackends.cli import process as console

    server = dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False,
                           timeout=timedelta(seconds=30))
    client = dist.TCPStore("127.0.0.1", server.port, 1, False, timedelta(seconds=30))
    threading.Thread(target=lambda: client.get("released"), daemon=True).start()


    class Stdout:
        def __init__(self, inner):
            self.inner = inner

        def write(self, text):
            return self.inner.write(text)

        def flush(self):
            self.inner.flush()
            if sys.is_finalizing():  # the interpreter is shutting down: let the thread return
                server.set("released", "1")
                time.sleep(0.5)


    sys.stdout = Stdout(sys.stdout)
    print("ready", flush=True)
    time.sleep(0.2)  # the thread is inside client.get now
    {exit}(3)
    """
)


def _run(exit_call: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(exit=exit_call)],
        env=clean_environment(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_a_daemon_thread_inside_torch_at_exit_does_not_abort_the_command() -> None:
    result = _run("console.exit")
    assert result.returncode == 3, result.stderr
    assert result.stdout == "ready\n"
    assert "terminate called" not in result.stderr


@pytest.mark.slow
@pytest.mark.skipif(
    sys.version_info >= (3, 14),
    reason="Python 3.14 parks daemon threads at shutdown instead of ending them, so the plain "
    "exit no longer aborts there",
)
def test_the_plain_interpreter_exit_aborts_in_the_same_script() -> None:
    # The control: without console.exit the same script ends with SIGABRT, so the test above
    # exercises the hazard and not a script that would have exited cleanly anyway.
    result = _run("sys.exit")
    assert result.returncode == -6, (result.returncode, result.stderr)
    assert "terminate called without an active exception" in result.stderr
