"""What every launcher shares: the user's MASTER_ADDR/MASTER_PORT win; bad and inconsistent
values are errors naming the variables."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from accelbackends import ConfigError

from .varsets import (
    PYTORCHJOB_WORKER,
    SRUN_UNEVEN,
    TORCHRUN_WORKER,
    TRAINJOB_NODE,
    HYDRA_2x4,
    JSRUN_2x4,
    MPIRUN_2x4,
    PALS_2x4,
    SRUN_2x4,
    cluster,
)

# -- the user's MASTER_ADDR / MASTER_PORT ---------------------------------------------------------


@pytest.mark.parametrize(
    "env",
    [
        SRUN_2x4,
        SRUN_UNEVEN,
        MPIRUN_2x4,
        HYDRA_2x4,
        PALS_2x4,
        JSRUN_2x4,
        PYTORCHJOB_WORKER,
        TRAINJOB_NODE,
    ],
    ids=["slurm", "slurm-uneven", "openmpi", "mpich", "pals", "lsf", "pytorchjob", "trainjob"],
)
def test_a_master_address_and_port_the_user_set_always_win(env: Mapping[str, str]) -> None:
    info = cluster({**env, "MASTER_ADDR": "head.example", "MASTER_PORT": "31999"})
    assert (info.master_addr, info.master_port) == ("head.example", 31999)
    assert (info.sources["master_addr"], info.sources["master_port"]) == (
        "MASTER_ADDR",
        "MASTER_PORT",
    )


# -- bad values -----------------------------------------------------------------------------------

BAD_VALUES = [
    (SRUN_2x4, "SLURM_PROCID", "six"),
    (SRUN_2x4, "SLURM_STEP_NUM_TASKS", "-8"),
    (SRUN_2x4, "SLURM_LOCALID", "2.0"),
    (SRUN_2x4, "SLURM_NODEID", ""),
    (SRUN_2x4, "SLURM_STEP_ID", "batch"),
    (SRUN_2x4, "SLURM_STEP_TASKS_PER_NODE", "4(x)"),
    (SRUN_2x4, "SLURM_STEP_TASKS_PER_NODE", "0(x2)"),
    (SRUN_2x4, "SLURM_STEP_NODELIST", "gnode[10-"),
    (SRUN_2x4, "SLURM_STEP_NODELIST", "gnode[20-10]"),
    (MPIRUN_2x4, "OMPI_COMM_WORLD_RANK", "5x"),
    (MPIRUN_2x4, "OMPI_COMM_WORLD_LOCAL_SIZE", "four"),
    (HYDRA_2x4, "PMI_SIZE", "8.0"),
    (HYDRA_2x4, "MPI_LOCALRANKID", "-1"),
    (PALS_2x4, "PALS_NODEID", "n1"),
    (JSRUN_2x4, "JSM_NAMESPACE_SIZE", "0x8"),
    (PYTORCHJOB_WORKER, "RANK", "two"),
    (PYTORCHJOB_WORKER, "PET_NNODES", "4 nodes"),
    (TRAINJOB_NODE, "PET_MASTER_PORT", "70000"),
    (TORCHRUN_WORKER, "LOCAL_WORLD_SIZE", "4/4"),
    ({**MPIRUN_2x4, "MASTER_ADDR": "node01"}, "MASTER_PORT", "http"),
]


@pytest.mark.parametrize(
    "env, var, value", BAD_VALUES, ids=[f"{var}={value!r}" for _, var, value in BAD_VALUES]
)
def test_a_bad_value_is_a_config_error_naming_the_variable_and_the_value(
    env: Mapping[str, str], var: str, value: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        cluster({**env, var: value})
    message = str(caught.value)
    assert var in message
    if value.strip():
        assert repr(value) in message or f"={value}" in message


INCONSISTENT = [
    (
        # no MASTER_ADDR: the inconsistency is reported, not the missing address
        {**MPIRUN_2x4, "OMPI_COMM_WORLD_RANK": "8"},
        ("OMPI_COMM_WORLD_RANK=8", "OMPI_COMM_WORLD_SIZE=8"),
    ),
    (
        {**HYDRA_2x4, "MPI_LOCALRANKID": "4", "MASTER_ADDR": "n"},
        ("MPI_LOCALRANKID=4", "MPI_LOCALNRANKS=4"),
    ),
    (
        {**SRUN_2x4, "SLURM_LOCALID": "4"},
        ("SLURM_LOCALID=4", "SLURM_STEP_TASKS_PER_NODE[SLURM_NODEID]=4"),
    ),
    (
        {**SRUN_2x4, "SLURM_STEP_NUM_TASKS": "9"},
        ("SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS=9"),
    ),
    (
        {**SRUN_2x4, "SLURM_STEP_NUM_NODES": "3"},
        ("SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NUM_NODES=3"),
    ),
    (
        {**SRUN_2x4, "SLURM_NODEID": "2"},
        ("SLURM_NODEID=2", "SLURM_STEP_TASKS_PER_NODE"),
    ),
    (
        {
            k: v
            for k, v in SRUN_2x4.items()
            if k not in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
        }
        | {"SLURM_STEP_NUM_NODES": "3"},
        ("SLURM_STEP_NUM_TASKS=8", "SLURM_STEP_NUM_NODES=3", "SLURM_NTASKS_PER_NODE=4"),
    ),
    (
        {**PYTORCHJOB_WORKER, "WORLD_SIZE": "8"},
        ("WORLD_SIZE=8", "PET_NNODES=4"),
    ),
    (
        {**PYTORCHJOB_WORKER, "PET_NODE_RANK": "3"},
        ("RANK=2", "PET_NODE_RANK=3"),
    ),
    (
        {**JSRUN_2x4, "JSM_NAMESPACE_LOCAL_SIZE": "16"},
        ("JSM_NAMESPACE_LOCAL_SIZE=16", "JSM_NAMESPACE_SIZE=8"),
    ),
]


@pytest.mark.parametrize(
    "env, named", INCONSISTENT, ids=[" vs ".join(named[:2]) for _, named in INCONSISTENT]
)
def test_inconsistent_values_are_errors_naming_both_variables(
    env: Mapping[str, str], named: tuple[str, ...]
) -> None:
    with pytest.raises(ConfigError) as caught:
        cluster(env)
    for text in named:
        assert text in str(caught.value)


@pytest.mark.parametrize(
    "env, match",
    [
        ({**HYDRA_2x4, "MPI_LOCALRANKID": "", "MPI_LOCALNRANKS": ""}, "MPI_LOCALRANKID"),
        ({"PMIX_RANK": "1", "PMIX_NAMESPACE": "x"}, "WORLD_SIZE"),
        ({"PMIX_RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "h"}, "LOCAL_WORLD_SIZE"),
        ({k: v for k, v in PALS_2x4.items() if k != "PMI_SIZE"}, "PMI_SIZE"),
        ({**PYTORCHJOB_WORKER, "PET_NPROC_PER_NODE": "4"}, "torchrun"),
        ({**PYTORCHJOB_WORKER, "PET_NPROC_PER_NODE": "gpu"}, "torchrun"),
        ({**TRAINJOB_NODE, "PET_NNODES": "1:4"}, "elastic range"),
        (
            {k: v for k, v in SRUN_2x4.items() if "TASKS_PER_NODE" not in k},
            "SLURM_NTASKS_PER_NODE",
        ),
    ],
    ids=[
        "hydra-without-local-rank",
        "pmix-without-world-size",
        "pmix-without-local-size",
        "pals-without-pmi-size",
        "pytorchjob-nproc-4-without-torchrun",
        "pytorchjob-nproc-gpu-without-torchrun",
        "trainjob-elastic-without-torchrun",
        "srun-without-tasks-per-node",
    ],
)
def test_missing_launcher_variables_say_what_to_set(env: Mapping[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        cluster(env)


def test_a_plain_env_launch_missing_its_address_names_what_an_env_launch_sets() -> None:
    with pytest.raises(ConfigError) as caught:
        cluster({"RANK": "0", "WORLD_SIZE": "2"})
    assert "missing MASTER_ADDR, MASTER_PORT; an env:// launch sets" in str(caught.value)
