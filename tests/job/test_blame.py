"""The rank named when a multi-rank run fails is the one whose own error came first.

Before: a plugin's ``accelbackends_post_init`` raising on rank 1 was reported, 10 of 10 times,
as "rank 0 of 2 raised RuntimeError: ... Connection closed by peer" (rank 1 tore its group
down before its report was dated), and a rank stopped by SIGSTOP was never named first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import run_cli

from accelbackends.testing.cluster import clean_environment

pytestmark = pytest.mark.slow

PluginDist = Callable[..., Path]
CPU = {"ACCELBACKENDS_DISABLE": "cuda,hpu,xpu"}
#: How many times each run is repeated (the fault was a race between reports).
RUNS = int(os.environ.get("ABTEST_BLAME_RUNS", "2"))

_FAILS_ON_RANK_ONE = """
from accelbackends.plugin import hookimpl

@hookimpl
def accelbackends_post_init(context):
    if context.rank == 1:
        raise RuntimeError("post-init refused on rank 1")
"""


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("accelbackends: error:")]


def test_check_names_the_rank_whose_post_init_raised(plugin_dist: PluginDist) -> None:
    site = plugin_dist("refuser", _FAILS_ON_RANK_ONE)
    for _ in range(RUNS):
        result = run_cli(
            "check", "--nproc", "2", "--max-bytes", "4096", env=CPU, pythonpath=site, timeout=150
        )
        assert result.returncode == 1, result.stderr
        (line,) = _error_lines(result.stderr)
        assert "rank 1 of 2" in line and "post-init refused on rank 1" in line, result.stderr
        assert "rank 0 of 2" not in line, result.stderr


_SPAWN = """
import sys
import accelbackends

def work(ctx):
    return ctx.rank

try:
    accelbackends.spawn(work, nprocs=2)
except accelbackends.SpawnError as exc:
    print(f"rank={exc.rank}")
    print(str(exc).splitlines()[0])
    print(str(exc).splitlines()[-1])
"""


def test_spawn_names_the_rank_whose_post_init_raised(plugin_dist: PluginDist) -> None:
    site = plugin_dist("refuser", _FAILS_ON_RANK_ONE)
    env = clean_environment(os.environ)
    env.update(CPU, PYTHONPATH=os.pathsep.join([str(site), env.get("PYTHONPATH", "")]))
    for _ in range(RUNS):
        done = subprocess.run(
            [sys.executable, "-c", _SPAWN], env=env, capture_output=True, text=True, timeout=150
        )
        lines = done.stdout.splitlines()
        assert lines and lines[0] == "rank=1", (done.stdout, done.stderr)
        assert "post-init refused on rank 1" in lines[1]
        assert "rank 0 failed after it, as a consequence" in lines[-1] or len(lines) == 3


_STOPPED = textwrap.dedent(
    """
    import os, signal
    import torch, torch.distributed as dist
    import accelbackends

    def work(ctx):
        if ctx.rank == 0:
            os.kill(os.getpid(), signal.SIGSTOP)
        dist.all_reduce(torch.ones(1))

    try:
        accelbackends.spawn(work, nprocs=2, timeout=5)
    except accelbackends.SpawnError as exc:
        print(f"rank={exc.rank}")
        print(str(exc))
    """
)


def test_spawn_names_a_rank_stopped_by_sigstop_as_the_one_not_answering() -> None:
    env = clean_environment(os.environ)
    env.update(CPU)
    done = subprocess.run(
        [sys.executable, "-c", _STOPPED], env=env, capture_output=True, text=True, timeout=150
    )
    lines = done.stdout.splitlines()
    assert lines and lines[0] == "rank=0", (done.stdout, done.stderr)
    assert "rank 0 of 2 stopped answering: it was stopped by a signal (SIGSTOP" in lines[1]
    assert "as a consequence, rank 1 of 2 raised" in done.stdout
