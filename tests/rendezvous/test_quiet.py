"""Rank 0 waits for the others quietly: no torch C++ warning per poll, whatever the script
imported first, and accelbackends' own progress line stays visible (torch 2.4 to 2.13 log a
``socket.cpp`` warning for every TCPStore wait that times out)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from accelbackends.testing.cluster import clean_environment

#: torch imported before init(), as in every real training script: TORCH_CPP_LOG_LEVEL is read
#: at torch's import, so accelbackends cannot lower it any more.
SCRIPT = """
import torch
import accelbackends
try:
    accelbackends.init()
except accelbackends.RendezvousError as exc:
    print("TIMED OUT", exc)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.timeout(120)
def test_rank_zero_waiting_alone_after_importing_torch_prints_only_its_progress() -> None:
    env = {
        **clean_environment(os.environ),
        "RANK": "0",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        # The progress line comes every 10 s; the wait ends just after the first one.
        "ACCELBACKENDS_RENDEZVOUS_TIMEOUT": "11",
    }
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=100,
        check=False,
    )
    output = result.stdout + result.stderr
    assert "TIMED OUT rendezvous timed out after 11 s" in output, output[-3000:]
    assert "waiting for ranks: 1/2 joined (rank 1 missing)" in output, output[-3000:]
    assert "waitForInput" not in output and "socket.cpp" not in output, output[-3000:]
