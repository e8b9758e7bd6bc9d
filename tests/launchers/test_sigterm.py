"""A SIGTERM ends a rank within seconds even while its main thread is blocked in native code.

The rank here is ``accelbackends check`` as rank 1 of a two-rank ``env://`` job whose store (a
plain torch TCPStore hosted by this test) never completes the rendezvous: the rank sits inside
torch's C++ store wait, where the CLI's Python SIGTERM handler cannot run. Before the fix it
stayed there until the rendezvous timeout (600 s here); the bound below is far above the
watchdog's grace and far below that timeout.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest

from accelbackends.rendezvous.network import connections_to

from .launchers import clean_env

pytestmark = pytest.mark.slow


def test_sigterm_ends_a_rank_blocked_in_a_native_store_wait() -> None:
    import torch.distributed as dist

    store = dist.TCPStore(
        "127.0.0.1", 0, 2, True, wait_for_workers=False, timeout=timedelta(seconds=300)
    )
    env = clean_env(
        RANK="1",
        WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(store.port),
        ACCELBACKENDS_RENDEZVOUS_TIMEOUT="600",
    )
    rank = subprocess.Popen(
        [sys.executable, "-m", "accelbackends", "check"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Wait (bounded) until the rank is connected to the store (besides the store's own
        # client): it then waits, in native code, for rank 0's nonce, which never comes.
        deadline = time.monotonic() + 120
        while (
            len(connections_to(store.port)) < 2
            and rank.poll() is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        assert rank.poll() is None, rank.communicate()
        assert len(connections_to(store.port)) >= 2, "the rank never reached the store"
        rank.send_signal(signal.SIGTERM)
        _, stderr = rank.communicate(timeout=60)
    finally:
        if rank.poll() is None:
            rank.kill()
            rank.communicate()
    assert rank.returncode == 143, stderr
    assert stderr.strip().endswith("accelbackends: terminated"), stderr
    assert "Traceback" not in stderr


_SLOW_CLEANUP = """
import sys, time
from accelbackends.cli import info, main as cli

def collect(*args, **kwargs):
    try:
        print("ready", flush=True)  # inside the try: the signal may come right after it
        time.sleep(60)
    finally:
        time.sleep(2 * cli_grace)  # longer than the watchdog's grace
        print("cleaned up", flush=True)

from accelbackends.cli.sigterm import GRACE_S as cli_grace
info.collect = collect
sys.exit(cli.main(["info"]))
"""


def test_a_sigterm_the_python_handler_took_lets_the_cleanup_finish_past_the_grace() -> None:
    # Where the main thread is responsive, the CLI's own handler runs and its cleanup (stopping
    # ranks) may take longer than the watchdog's grace: the watchdog must stand down.
    env = clean_env()
    code = _SLOW_CLEANUP
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 143, stderr
    assert "cleaned up" in stdout, stderr
    assert stderr.strip() == "accelbackends: terminated"
