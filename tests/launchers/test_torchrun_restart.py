"""torchrun's elastic restart for real: a rank dies in the first attempt, torchrun restarts the
worker group (``--max-restarts 1``), and the second attempt's ``init()`` works, because its
store keys carry the restart count and nothing of the first attempt is read again."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .launchers import RANK_PROGRAM, clean_env, describe, reports

pytestmark = pytest.mark.slow


def test_the_second_attempt_after_a_rank_died_initialises_and_all_reduces() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "1",
            "--monitor-interval",
            "0.5",
            RANK_PROGRAM,
            "--die-in-first-attempt",
            "1",
        ],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, describe(done)
    assert "dying in the first attempt" in done.stderr, describe(done)
    ranks = reports(done.stdout)
    assert [(r["rank"], r["restart"], r["sum"]) for r in ranks] == [
        (0, "1", 3.0),
        (1, "1", 3.0),
    ], describe(done)
    assert all(r["launcher"] == "torchrun" and r["run_id"].endswith("/1") for r in ranks)
