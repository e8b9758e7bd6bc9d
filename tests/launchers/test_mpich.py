"""MPICH's real ``mpiexec`` (Hydra) starting ranks that call ``accelbackends.init()``.

Hydra sets no job id: two jobs on one node are told apart by the ``hydra_pmi_proxy`` each rank
descends from, so they derive different ports and store keys and both run. Where a user gives
both jobs the same ``MASTER_PORT``, the second must fail at once, naming the port, and never be
counted into the first job.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from .launchers import (
    CHECK,
    RANK_PROGRAM,
    assert_check_passed,
    clean_env,
    describe,
    find_launcher,
    free_port,
    reports,
    two_local_ranks,
)

MPIEXEC, VERSION = find_launcher("mpich")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(MPIEXEC is None, reason=VERSION),
]


def _mpiexec(*args: str, **env: str) -> subprocess.Popen[str]:
    assert MPIEXEC is not None
    return subprocess.Popen(
        [MPIEXEC, *args],
        env=clean_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(
    process: subprocess.Popen[str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        err += f"\n(killed after {timeout:.0f} s)"
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_mpiexec_np_2_ranks_initialise_as_mpich_and_all_reduce() -> None:
    done = _finish(_mpiexec("-np", "2", sys.executable, RANK_PROGRAM))
    ranks = two_local_ranks(done, "mpich")
    assert all("hydra_pmi_proxy" in r["sources"]["run_id"] for r in ranks)


def test_accelbackends_check_under_mpiexec_passes_on_every_rank() -> None:
    done = _finish(
        _mpiexec(
            "-np",
            "2",
            *CHECK,
        )
    )
    assert_check_passed(done)


def test_two_mpiexec_jobs_on_one_node_derive_different_ports_and_both_run() -> None:
    first = _mpiexec("-np", "2", sys.executable, RANK_PROGRAM)
    second = _mpiexec("-np", "2", sys.executable, RANK_PROGRAM)
    results = [_finish(first), _finish(second)]
    for done in results:
        assert done.returncode == 0, describe(done)
        assert [r["sum"] for r in reports(done.stdout)] == [3.0, 3.0], describe(done)
    jobs = [reports(done.stdout)[0] for done in results]
    assert jobs[0]["run_id"] != jobs[1]["run_id"]
    assert jobs[0]["master_port"] != jobs[1]["master_port"]


_HOLDING_RANK = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import torch, torch.distributed as dist
    import accelbackends

    release = Path(sys.argv[1])
    try:
        ctx = accelbackends.init(timeout=120, rendezvous_timeout=120)
    except accelbackends.AccelBackendsError as exc:
        # What a user's script would do: say the package's one-line message and fail.
        sys.exit(f"error: {exc}")
    release.with_suffix(".ready").touch()
    try:
        deadline = time.monotonic() + 150
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        total = torch.tensor([float(ctx.rank + 1)])
        dist.all_reduce(total)
        print("LAUNCHED " + json.dumps({"rank": ctx.rank, "sum": total.item()}), flush=True)
    finally:
        accelbackends.destroy()
    """
)


def test_a_second_job_on_the_same_master_port_fails_naming_it_and_never_joins_the_first(
    tmp_path: Path,
) -> None:
    program, release = tmp_path / "hold.py", tmp_path / "release"
    program.write_text(_HOLDING_RANK)
    port = str(free_port())
    first = _mpiexec("-np", "2", sys.executable, str(program), str(release), MASTER_PORT=port)
    ready = release.with_suffix(".ready")
    deadline = time.monotonic() + 150
    while not ready.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)  # the first job owns the port and its process group before the second
    assert ready.exists(), "the first job never initialised"
    try:
        # The first job's ranks hold their process group open until the second job has ended.
        second = _finish(
            _mpiexec(
                "-np",
                "2",
                sys.executable,
                str(program),
                str(release),
                MASTER_PORT=port,
                ACCELBACKENDS_RENDEZVOUS_TIMEOUT="600",
            ),
            timeout=60,
        )
    finally:
        release.touch()
    done = _finish(first, timeout=60)
    assert done.returncode == 0, describe(done)
    assert [r["sum"] for r in reports(done.stdout)] == [3.0, 3.0], describe(done)
    assert second.returncode != 0, describe(second)
    assert "killed after" not in second.stderr, describe(second)
    assert "MASTER_PORT" in second.stderr, describe(second)
    assert "Traceback" not in second.stderr, describe(second)
