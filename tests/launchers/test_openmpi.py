"""Open MPI's real ``mpirun`` starting ranks that call ``accelbackends.init()``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .launchers import RANK_PROGRAM, clean_env, describe, find_launcher, reports

MPIRUN, VERSION = find_launcher("openmpi")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(MPIRUN is None, reason=VERSION),
]
# Root in CI containers; two ranks on a machine that may have fewer cores.
_OPTIONS = ("--allow-run-as-root", "--oversubscribe", "--bind-to", "none")


def _mpirun(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    assert MPIRUN is not None
    return subprocess.run(
        [MPIRUN, *_OPTIONS, *args],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_mpirun_np_2_ranks_initialise_as_openmpi_and_all_reduce() -> None:
    done = _mpirun("-np", "2", sys.executable, RANK_PROGRAM)
    assert done.returncode == 0, describe(done)
    ranks = reports(done.stdout)
    assert [r["rank"] for r in ranks] == [0, 1], describe(done)
    for report in ranks:
        assert report["launcher"] == "openmpi"
        assert (report["world_size"], report["local_world_size"], report["node_rank"]) == (2, 2, 0)
        assert report["local_rank"] == report["rank"]
        assert report["sum"] == 3.0
        assert report["sources"]["run_id"] == "PMIX_NAMESPACE"
    assert ranks[0]["run_id"] == ranks[1]["run_id"] != ""
    assert ranks[0]["master_port"] == ranks[1]["master_port"]


def test_accelbackends_check_under_mpirun_passes_on_every_rank() -> None:
    done = _mpirun(
        "-np",
        "2",
        sys.executable,
        "-m",
        "accelbackends",
        "check",
        "--max-bytes",
        "64KiB",
        "--iters",
        "3",
    )
    assert done.returncode == 0, describe(done)
    assert "PASSED" in done.stdout, describe(done)
