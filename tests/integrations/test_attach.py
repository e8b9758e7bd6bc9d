"""attach() for a group made outside accelbackends, and the checks that keep a framework from
training another job than the launched one (each in its own process: they hold a group)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from accelbackends.testing.cluster import clean_environment

ONE_RANK_GROUP = """
import warnings, torch.distributed as dist, accelbackends
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
"""


def _python(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean_environment(os.environ), **env},
        check=False,
    )


def test_attach_describes_a_group_made_by_hand(tmp_path: Path) -> None:
    result = _python(
        ONE_RANK_GROUP
        + "ctx = accelbackends.attach()\n"
        + "print(ctx.rank, ctx.world_size, ctx.backend, ctx.accelerator, ctx.device, ctx.launcher)",
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "1", "gloo", "cpu", "cpu", "single"]


def test_attach_without_a_group_says_when_to_call_it(tmp_path: Path) -> None:
    result = _python("import accelbackends; accelbackends.attach()", tmp_path)
    assert result.returncode == 1
    assert "InitError: accelbackends.attach() found no initialised process group" in result.stderr


def test_attach_fails_when_the_launcher_names_another_job(tmp_path: Path) -> None:
    launcher = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    result = _python(ONE_RANK_GROUP + "accelbackends.attach()", tmp_path, **launcher)
    assert result.returncode == 1
    assert (
        "the process group says rank 0 of 1, but the env launcher says rank 1 of 2 "
        "(RANK=1, WORLD_SIZE=2)"
    ) in result.stderr


def test_attach_warns_once_naming_both_devices(tmp_path: Path) -> None:
    code = ONE_RANK_GROUP + textwrap.dedent("""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            accelbackends.attach(device="meta")
            accelbackends.attach(device="meta")
        for warning in caught:
            print("WARNING", warning.message)
    """)
    result = _python(code, tmp_path)
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stdout.splitlines() if line.startswith("WARNING")]
    assert len(warned) == 1
    assert "the framework trains on meta but accelbackends would select 'cpu'" in warned[0]


def test_init_refuses_a_foreign_group_pointing_to_attach(tmp_path: Path) -> None:
    result = _python(ONE_RANK_GROUP + "accelbackends.init()", tmp_path)
    assert result.returncode == 1
    assert "call accelbackends.attach() to get a context for that group" in result.stderr


def test_init_fails_when_the_environment_names_another_job_and_leaves_no_group(
    tmp_path: Path,
) -> None:
    code = """
        import torch.distributed as dist, accelbackends
        try:
            accelbackends.init(cluster=accelbackends.ClusterInfo(launcher="single"))
        except accelbackends.InitError as exc:
            print("ERROR", exc)
        print("initialised", dist.is_initialized(), accelbackends.is_initialized())
    """
    result = _python(code, tmp_path, WORLD_SIZE="2", RANK="0")
    assert result.returncode == 0, result.stderr
    assert "disagrees with this process's environment: WORLD_SIZE=2 (the group: 1)" in (
        result.stdout
    )
    assert "initialised False False" in result.stdout


def test_destroy_fails_when_a_framework_rewrote_the_job_after_init(tmp_path: Path) -> None:
    code = """
        import os, accelbackends
        accelbackends.init()
        os.environ.update(WORLD_SIZE="2", LOCAL_RANK="0")  # as Lightning does in its parent
        accelbackends.destroy()
    """
    result = _python(code, tmp_path)
    assert result.returncode == 1
    assert "WORLD_SIZE=2 (the group: 1), LOCAL_RANK=0" not in result.stderr  # LOCAL_RANK agrees
    assert "WORLD_SIZE=2 (the group: 1)" in result.stderr


def test_exit_without_destroy_after_a_framework_rewrote_the_job_is_not_0(
    tmp_path: Path,
) -> None:
    code = """
        import os, accelbackends
        accelbackends.init()
        os.environ["WORLD_SIZE"] = "2"
    """
    result = _python(code, tmp_path)
    assert result.returncode == 1
    assert "accelbackends: InitError:" in result.stderr
    assert "WORLD_SIZE=2 (the group: 1)" in result.stderr
    assert "AccelBackendsEnvironment" in result.stderr


def test_init_exports_the_job_for_frameworks_and_destroy_takes_it_back(tmp_path: Path) -> None:
    code = """
        import os, accelbackends
        names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "ACCELERATE_USE_CPU",
                 "DS_ACCELERATOR")
        def job(ctx):
            seen = {name: os.environ.get(name) for name in names}
            return seen
        print(accelbackends.spawn(job, nprocs=2)[1])
        accelbackends.init()
        print({name: os.environ.get(name) for name in names})
        accelbackends.destroy()
    """
    result = _python(code, tmp_path)
    assert result.returncode == 0, result.stderr
    spawned, alone = result.stdout.splitlines()
    assert spawned == str(
        {
            "RANK": "1",
            "WORLD_SIZE": "2",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2",
            "ACCELERATE_USE_CPU": "true",
            "DS_ACCELERATOR": "cpu",
        }
    )
    # One rank: nothing exported, so Lightning stays free to start ranks of its own.
    assert alone == str(
        dict.fromkeys(
            (
                "RANK",
                "WORLD_SIZE",
                "LOCAL_RANK",
                "LOCAL_WORLD_SIZE",
                "ACCELERATE_USE_CPU",
                "DS_ACCELERATOR",
            )
        )
    )
