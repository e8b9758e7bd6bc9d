"""init()/destroy() in a loop on one MASTER_PORT: one failed attempt must not set the ranks apart.

Before: the attempt number in the rendezvous keys was each process's own count, so once one
rank failed an attempt that the other did not (a connection reset by rank 0's store of the
previous cycle), the two stayed one attempt apart and every later init() timed out. Rank 0 now
numbers the attempts and the other ranks join the one it opened.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from accelbackends.testing.cluster import clean_environment

pytestmark = pytest.mark.slow

#: Successful cycles each rank must reach (the fault, when there is one, comes in the second).
CYCLES = int(os.environ.get("ABTEST_RETRY_CYCLES", "5"))
LIMIT = 180

_RANK = """
import os, sys
import torch, torch.distributed as dist
import accelbackends

rank, cycles, bad_port = int(os.environ["RANK"]), int(sys.argv[1]), sys.argv[2]
port = os.environ["MASTER_PORT"]
ok = failed = attempts = 0
while ok < cycles and attempts < cycles + 4:
    attempts += 1
    inject = rank == 1 and attempts == 2
    if inject:  # this rank's attempt fails in the rendezvous, the other rank's does not
        os.environ.update(MASTER_PORT=bad_port, ACCELBACKENDS_RENDEZVOUS_TIMEOUT="2")
    try:
        ctx = accelbackends.init()
        value = torch.ones(1)
        dist.all_reduce(value)
        assert value.item() == ctx.world_size
        accelbackends.destroy()
        ok += 1
    except accelbackends.AccelBackendsError as exc:
        failed += 1
        print(f"rank {rank} attempt {attempts}: {str(exc).splitlines()[0]}", file=sys.stderr)
    finally:
        os.environ.update(MASTER_PORT=port, ACCELBACKENDS_RENDEZVOUS_TIMEOUT="30")
print(f"rank {rank}: {ok} ok, {failed} failed", flush=True)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_lockstep_init_destroy_loop_recovers_after_one_rank_fails_an_attempt(
    tmp_path: os.PathLike[str],
) -> None:
    port, bad_port = _free_port(), _free_port()
    ranks = []
    for rank in (0, 1):
        env = clean_environment(os.environ)
        env.update(
            XDG_CONFIG_HOME=str(tmp_path),
            RANK=str(rank),
            WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            ACCELBACKENDS_RENDEZVOUS_TIMEOUT="30",
            ACCELBACKENDS_DISABLE="cuda,hpu,xpu",
        )
        ranks.append(
            subprocess.Popen(
                [sys.executable, "-c", _RANK, str(CYCLES), str(bad_port)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = []
    for process in ranks:
        try:
            out, err = process.communicate(timeout=LIMIT)
        except subprocess.TimeoutExpired:
            for other in ranks:
                other.kill()
            pytest.fail("the ranks ran past the limit: they never met again")
        results.append((process.returncode, out, err))
    for rank, (code, out, err) in enumerate(results):
        assert code == 0, err
        assert f"rank {rank}: {CYCLES} ok" in out, (out, err)
    # Both ranks met again after the injected fault, within the attempts the loop allows. Rank
    # 1 may lose an attempt more than the injected one: connecting while rank 0 still tears
    # down the previous cycle's store on the same port is the very transient fault this test
    # injects, which the agreed attempt numbers make recoverable, not impossible.
    failed = {
        rank: int(out.rsplit(", ", 1)[1].split()[0]) for rank, (_, out, _) in enumerate(results)
    }
    assert failed[1] >= 1, results[1]  # the injected failure was counted, and survived
