"""Under torchrun: the agent's store is joined as a client, and collectives work."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from accelbackends.plugin import torchcompat
from accelbackends.testing.cluster import clean_environment

SCRIPT = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist, accelbackends
    ctx = accelbackends.init()
    t = torch.tensor([ctx.rank + 1.0])
    dist.all_reduce(t)
    sys.stdout.write(f"RANK {ctx.rank}/{ctx.world_size} local {ctx.local_rank}/"
                     f"{ctx.local_world_size} launcher {ctx.launcher} "
                     f"hosted {ctx.cluster.store_hosted} sum {t.item():g};"
                     f"agent store {os.environ.get('TORCHELASTIC_USE_AGENT_STORE')};\\n")
    sys.stdout.flush()
    accelbackends.destroy()
""")


def _torchrun(tmp_path: Path, *launcher_args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = clean_environment(os.environ)
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", *launcher_args, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


@pytest.mark.slow
def test_torchrun_standalone_two_ranks(tmp_path: Path) -> None:
    result = _torchrun(tmp_path, "--standalone", "--nproc-per-node", "2")
    assert result.returncode == 0, result.stderr
    # torchrun hosts the store in its agent and says so (TORCHELASTIC_USE_AGENT_STORE=True)
    # from some release after 2.4; torch 2.4.1's torchrun --standalone does not, and rank 0
    # hosts it there.
    hosted = "True" if torchcompat.release() >= (2, 13) else None
    agent = re.findall(r"agent store (\w+)", result.stdout)
    assert len(agent) == 2 and len(set(agent)) == 1, result.stdout
    assert hosted is None or agent[0] == hosted
    hosted = str(agent[0] == "True")
    assert sorted(re.findall(r"RANK [^;]*", result.stdout)) == [
        f"RANK 0/2 local 0/2 launcher torchrun hosted {hosted} sum 3",
        f"RANK 1/2 local 1/2 launcher torchrun hosted {hosted} sum 3",
    ]


@pytest.mark.slow
def test_torchrun_with_an_explicit_master_and_three_ranks(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = _torchrun(
        tmp_path,
        "--nnodes",
        "1",
        "--nproc-per-node",
        "3",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
    )
    assert result.returncode == 0, result.stderr
    reports = re.findall(r"RANK (\d)/3 [^;]* sum (\d+);", result.stdout)
    assert sorted(reports) == [("0", "6"), ("1", "6"), ("2", "6")]
