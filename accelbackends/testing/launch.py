"""Start N real processes the way ``torchrun`` does, for multi-process tests.

The calling process hosts the rendezvous store on loopback (like torchrun's agent) and every
rank connects to it as a client, so no port is guessed and no rank can take another's port.
Each rank gets torchrun's variables (``RANK``, ``LOCAL_RANK``, ``MASTER_PORT``, ...); its output
goes to files, so a chatty rank never blocks on a full pipe while the others wait for it.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RankResult", "launch_ranks"]


@dataclass(frozen=True)
class RankResult:
    """One rank's exit status and output.

    Attributes:
        rank: The rank.
        returncode: Its exit status (negative: killed by that signal).
        stdout: What it printed on stdout.
        stderr: What it printed on stderr.
    """

    rank: int
    returncode: int
    stdout: str
    stderr: str


def launch_ranks(
    argv: Sequence[str],
    nprocs: int,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
) -> list[RankResult]:
    """Run ``argv`` as ranks 0 .. ``nprocs - 1`` of one node; returns their results by rank.

    A rank still running after ``timeout`` seconds is killed (its return code is then negative).
    """
    from ..rendezvous.store import host_loopback_store

    store, port = host_loopback_store(nprocs, timeout)
    base = dict(os.environ if env is None else env)
    processes: list[tuple[subprocess.Popen[bytes], Path, Path]] = []
    with tempfile.TemporaryDirectory(prefix="accelbackends-ranks-") as directory:
        try:
            for rank in range(nprocs):
                out, err = Path(directory, f"{rank}.out"), Path(directory, f"{rank}.err")
                variables = {
                    "TORCHELASTIC_RUN_ID": f"accelbackends-test-{os.getpid()}-{port}",
                    "TORCHELASTIC_USE_AGENT_STORE": "True",
                    "RANK": str(rank),
                    "WORLD_SIZE": str(nprocs),
                    "LOCAL_RANK": str(rank),
                    "LOCAL_WORLD_SIZE": str(nprocs),
                    "GROUP_RANK": "0",
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port),
                }
                with out.open("wb") as stdout, err.open("wb") as stderr:
                    process = subprocess.Popen(
                        list(argv), env={**base, **variables}, stdout=stdout, stderr=stderr
                    )
                processes.append((process, out, err))
            deadline = time.monotonic() + timeout
            for process, _, _ in processes:
                try:
                    process.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        finally:
            for process, _, _ in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
            del store
        return [
            RankResult(
                rank,
                process.returncode,
                out.read_text(encoding="utf-8", errors="replace"),
                err.read_text(encoding="utf-8", errors="replace"),
            )
            for rank, (process, out, err) in enumerate(processes)
        ]
