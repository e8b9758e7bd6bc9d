"""Slurm: srun steps, salloc/sbatch shells, node lists, per-node counts and the derived port."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from accelbackends import ConfigError
from accelbackends.environments._common import port_from_id

from .varsets import (
    SALLOC_SHELL,
    SBATCH_SCRIPT,
    SLURM_PORT_200505,
    SRUN_PRESERVE_ENV,
    SRUN_UNEVEN,
    CaseTable,
    SRUN_2x4,
    check_case,
    cluster,
)

CASES: CaseTable = {
    "srun 2 nodes x 4 tasks": (
        SRUN_2x4,
        dict(
            launcher="slurm",
            rank=6,
            world_size=8,
            local_rank=2,
            local_world_size=4,
            node_rank=1,
            master_addr="gnode10",
            master_port=SLURM_PORT_200505,
        ),
    ),
    "srun 7 tasks on 4 nodes, 2(x3),1": (
        SRUN_UNEVEN,
        dict(
            launcher="slurm",
            rank=6,
            world_size=7,
            local_rank=0,
            local_world_size=1,
            node_rank=3,
            master_addr="rack1-n07",
            master_port=port_from_id("31337.3"),
        ),
    ),
    "srun --preserve-env: the step's variables win": (
        SRUN_PRESERVE_ENV,
        dict(
            launcher="slurm",
            rank=1,
            world_size=2,
            local_rank=0,
            local_world_size=1,
            node_rank=1,
            master_addr="node03",
            master_port=port_from_id("777.1"),
        ),
    ),
    "salloc shell is no job step": (SALLOC_SHELL, dict(launcher="single", world_size=1)),
    "sbatch script is no job step": (SBATCH_SCRIPT, dict(launcher="single", world_size=1)),
    "salloc interactive step is no job step": (
        {**SBATCH_SCRIPT, "SLURM_STEP_ID": "4294967290", "SLURM_STEPID": "4294967290"},
        dict(launcher="single", world_size=1),
    ),
}


@pytest.mark.parametrize("env, expected", CASES.values(), ids=list(CASES))
def test_each_launchers_real_variables_give_the_right_cluster(
    env: Mapping[str, str], expected: dict[str, Any]
) -> None:
    check_case(env, expected)


def test_slurm_sources_name_the_variables_info_shows() -> None:
    assert cluster(SRUN_2x4).sources == {
        "rank": "SLURM_PROCID",
        "world_size": "SLURM_STEP_NUM_TASKS",
        "local_rank": "SLURM_LOCALID",
        "node_rank": "SLURM_NODEID",
        "local_world_size": "SLURM_STEP_TASKS_PER_NODE[SLURM_NODEID]",
        "master_addr": "SLURM_STEP_NODELIST (first host)",
        "master_port": "SLURM_JOB_ID.SLURM_STEP_ID (hashed into 20000-29999)",
        "run_id": "SLURM_JOB_ID.SLURM_STEP_ID",
    }


def test_slurm_without_step_variables_uses_the_jobs_and_ntasks_per_node() -> None:
    env = {
        "SLURM_JOB_ID": "9",
        "SLURM_STEP_ID": "0",
        "SLURM_NTASKS": "4",
        "SLURM_NNODES": "2",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_JOB_NODELIST": "c[1-2]",
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
    }
    info = cluster(env)
    assert (info.world_size, info.local_world_size, info.master_addr) == (4, 2, "c1")
    assert info.sources["world_size"] == "SLURM_NTASKS"
    assert info.sources["local_world_size"] == "SLURM_NTASKS_PER_NODE"


def test_a_master_address_alone_keeps_the_derived_port() -> None:
    info = cluster({**SRUN_2x4, "MASTER_ADDR": "head"})
    assert (info.master_addr, info.master_port) == ("head", SLURM_PORT_200505)


def test_the_derived_slurm_port_is_the_same_on_every_rank_and_differs_between_steps() -> None:
    ports = {
        cluster(
            {
                **SRUN_2x4,
                "SLURM_PROCID": str(r),
                "SLURM_LOCALID": str(r % 4),
                "SLURM_NODEID": str(r // 4),
            }
        ).master_port
        for r in range(8)
    }
    assert ports == {SLURM_PORT_200505}
    other_step = cluster({**SRUN_2x4, "SLURM_STEP_ID": "1", "SLURM_STEPID": "1"})
    assert other_step.master_port != SLURM_PORT_200505
    assert 20000 <= SLURM_PORT_200505 < 30000


def test_reserved_ports_of_the_step_are_used_before_hashing_the_job_id() -> None:
    info = cluster({**SRUN_2x4, "SLURM_STEP_RESV_PORTS": "12000-12003"})
    assert info.master_port == 12000
    assert info.sources["master_port"] == "SLURM_STEP_RESV_PORTS (first reserved port)"
    assert (
        cluster(
            {**SRUN_2x4, "SLURM_STEP_RESV_PORTS": "12000-12003", "MASTER_PORT": "31000"}
        ).master_port
        == 31000
    )


@pytest.mark.parametrize("value", ["x-y", "99999", "0-3"])
def test_a_bad_reserved_port_list_is_an_error_naming_it(value: str) -> None:
    with pytest.raises(ConfigError, match="SLURM_STEP_RESV_PORTS="):
        cluster({**SRUN_2x4, "SLURM_STEP_RESV_PORTS": value})


def test_a_node_list_written_with_spaces_gives_its_first_host_as_slurm_would() -> None:
    info = cluster({**SRUN_2x4, "SLURM_STEP_NODELIST": "alpha, gnode[10,20]"})
    assert info.master_addr == "alpha"


def test_the_job_and_step_identify_the_run_so_two_steps_never_share_store_keys() -> None:
    assert cluster(SRUN_2x4).run_id == "slurm/200505.0"
    assert (
        cluster({**SRUN_2x4, "SLURM_STEP_ID": "1", "SLURM_STEPID": "1"}).run_id == "slurm/200505.1"
    )


def test_a_huge_repeated_per_node_count_is_a_mismatch_error_not_an_expansion() -> None:
    with pytest.raises(ConfigError, match=r"lists 2000000000 nodes but SLURM_STEP_NUM_NODES=2"):
        cluster({**SRUN_2x4, "SLURM_STEP_TASKS_PER_NODE": "1(x2000000000)"})
    with pytest.raises(
        ConfigError, match=r"SLURM_STEP_TASKS_PER_NODE='1\(x10000000000\)': repeat="
    ):
        cluster({**SRUN_2x4, "SLURM_STEP_TASKS_PER_NODE": "1(x10000000000)"})
