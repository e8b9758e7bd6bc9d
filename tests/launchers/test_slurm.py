"""A real Slurm (``slurmctld`` + two ``slurmd`` on this host): ``srun``, ``sbatch`` and a
two-node allocation, with ranks that call ``accelbackends.init()``.

The two nodes are named ``n1`` and ``n2``, which do not resolve (as on clusters whose node names
are not host names), so the two-node steps pass ``MASTER_ADDR`` the way the docs say to.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest

from .launchers import (
    CHECK,
    RANK_PROGRAM,
    assert_check_passed,
    describe,
    find_launcher,
    reports,
    two_local_ranks,
)
from .slurmcluster import RESERVED_PORTS, SlurmCluster

pytestmark = pytest.mark.slow
# Found at import: the tests' clean environment hides ACCELBACKENDS_TEST_MPICH from the test body.
_MPICH = find_launcher("mpich")
_PRINT_LAUNCHER = (
    "import accelbackends; print('BATCH', accelbackends.Registry().cluster_environment().launcher)"
)


def test_srun_n2_ranks_initialise_as_slurm_and_all_reduce(slurm: SlurmCluster) -> None:
    done = slurm.run("srun", "-N1", "-n2", sys.executable, RANK_PROGRAM)
    ranks = two_local_ranks(done, "slurm")
    assert all(r["run_id"].startswith("slurm/") and r["run_id"].endswith(".0") for r in ranks)


def test_an_sbatch_script_calling_srun_runs_the_ranks_of_its_step(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    script, output = tmp_path / "job.sh", tmp_path / "job.out"
    script.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/sh
            # The batch script itself is no job step: only srun's tasks are ranks.
            {sys.executable} -c "{_PRINT_LAUNCHER}"
            srun -n2 {sys.executable} {RANK_PROGRAM}
            """
        )
    )
    done = slurm.run("sbatch", "--wait", "-N1", "-n2", f"--output={output}", str(script))
    text = output.read_text() if output.exists() else ""
    assert done.returncode == 0, describe(done) + text
    assert "BATCH single" in text
    ranks = reports(text)
    assert [(r["launcher"], r["rank"], r["sum"]) for r in ranks] == [
        ("slurm", 0, 3.0),
        ("slurm", 1, 3.0),
    ], text


def test_an_sbatch_script_that_forgot_srun_is_refused_unless_standalone(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    script, output = tmp_path / "job.sh", tmp_path / "job.out"
    script.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/sh
            # Two tasks allocated, no srun: the program would run once, as a world of 1.
            {sys.executable} -m accelbackends info > /dev/null 2> info.err
            echo "INFO-EXIT $?"
            cat info.err
            {sys.executable} {RANK_PROGRAM}
            echo "NO-SRUN-EXIT $?"
            ACCELBACKENDS_STANDALONE=1 {sys.executable} {RANK_PROGRAM}
            echo "STANDALONE-EXIT $?"
            """
        )
    )
    done = slurm.run(
        "sbatch", "--wait", "-N1", "-n2", f"--chdir={tmp_path}", f"--output={output}", str(script)
    )
    text = output.read_text() if output.exists() else ""
    assert done.returncode == 0, describe(done) + text
    assert "INFO-EXIT 2" in text, text
    before_run = text.split("NO-SRUN-EXIT")[0]
    assert "SLURM_NTASKS=2" in before_run and "launch with srun" in before_run, text
    assert "NO-SRUN-EXIT 0" not in text, text
    assert "STANDALONE-EXIT 0" in text, text
    standalone = reports(text.split("NO-SRUN-EXIT")[1])
    assert [(r["launcher"], r["world_size"], r["sum"]) for r in standalone] == [
        ("single", 1, 1.0)
    ], text


def test_a_two_node_allocation_gives_each_node_its_node_rank(slurm: SlurmCluster) -> None:
    done = slurm.run(
        "srun", "-N2", "-n2", "--export=ALL,MASTER_ADDR=127.0.0.1", sys.executable, RANK_PROGRAM
    )
    assert done.returncode == 0, describe(done)
    ranks = reports(done.stdout)
    assert [(r["rank"], r["node_rank"], r["local_rank"]) for r in ranks] == [(0, 0, 0), (1, 1, 0)]
    for report in ranks:
        assert (report["world_size"], report["local_world_size"], report["sum"]) == (2, 1, 3.0)
        assert report["sources"]["local_world_size"] == "SLURM_STEP_TASKS_PER_NODE[SLURM_NODEID]"


def test_srun_resv_ports_gives_the_rendezvous_its_reserved_port(slurm: SlurmCluster) -> None:
    done = slurm.run("srun", "-N1", "-n2", "--resv-ports=2", sys.executable, RANK_PROGRAM)
    assert done.returncode == 0, describe(done)
    ranks = reports(done.stdout)
    assert len(ranks) == 2, describe(done)
    low, high = RESERVED_PORTS
    for report in ranks:
        assert low <= report["master_port"] <= high
        assert report["sources"]["master_port"] == "SLURM_STEP_RESV_PORTS (first reserved port)"


def test_accelbackends_check_under_srun_passes_on_every_rank(slurm: SlurmCluster) -> None:
    done = slurm.run(
        "srun",
        "-N1",
        "-n2",
        *CHECK,
    )
    assert_check_passed(done)


def test_mpiexec_inside_an_allocation_reads_one_rank_per_node_and_refuses_round_robin(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    mpiexec, why = _MPICH
    if mpiexec is None:
        pytest.skip(f"no MPICH mpiexec to start inside the allocation because {why}")
    script, output = tmp_path / "job.sh", tmp_path / "job.out"
    # Two one-slot nodes: -np 2 puts one rank on each; -np 4 wraps round-robin (0, 2 | 1, 3).
    script.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/sh
            export MASTER_ADDR=127.0.0.1
            {mpiexec} -np 2 {sys.executable} {RANK_PROGRAM}
            echo "ONE-PER-NODE-EXIT $?"
            {mpiexec} -np 4 {sys.executable} {RANK_PROGRAM} --recognise-only
            echo "ROUND-ROBIN-EXIT $?"
            """
        )
    )
    done = slurm.run(
        "sbatch", "--wait", "-N2", "-n2", f"--output={output}", str(script), timeout=240
    )
    text = output.read_text() if output.exists() else ""
    assert "ONE-PER-NODE-EXIT 0" in text, describe(done) + text
    one_per_node = reports(text.split("ONE-PER-NODE-EXIT")[0])
    # Hydra's proxies run as one srun step whose numbers equal the ranks': Slurm answers.
    assert [(r["launcher"], r["rank"], r["node_rank"], r["sum"]) for r in one_per_node] == [
        ("slurm", 0, 0, 3.0),
        ("slurm", 1, 1, 3.0),
    ], text
    round_robin = text.split("ONE-PER-NODE-EXIT")[1]
    assert "ROUND-ROBIN-EXIT 0" not in round_robin, text
    # Found anywhere in the output: the ranks share it, and one's line can run into another's
    # ("RECOGNISED mpich 3 1REFUSED PMI_RANK=1 ...").
    said = (
        r"REFUSED PMI_RANK=(\d+) with MPI_LOCALRANKID=(\d+) and MPI_LOCALNRANKS=2 is not a packed"
    )
    assert sorted(re.findall(said, round_robin)) == [("1", "0"), ("2", "1")], text
