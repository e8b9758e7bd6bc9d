"""Open MPI's real ``mpirun`` starting ranks that call ``accelbackends.init()``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .launchers import (
    CHECK,
    RANK_PROGRAM,
    assert_check_passed,
    clean_env,
    find_launcher,
    two_local_ranks,
)

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
    ranks = two_local_ranks(done, "openmpi")
    assert all(r["sources"]["run_id"] == "PMIX_NAMESPACE" for r in ranks)


def test_accelbackends_check_under_mpirun_passes_on_every_rank() -> None:
    done = _mpirun(
        "-np",
        "2",
        *CHECK,
    )
    assert_check_passed(done)
