"""Which environment answers when several launchers' variables coexist (launchers nest)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

import accelbackends
from accelbackends.environments import BUILTIN

from .varsets import (
    DAEMON_STEP,
    PYTORCHJOB_WORKER,
    SALLOC_SHELL,
    SRUN_PRESERVE_ENV,
    SRUN_UNEVEN,
    TORCHRUN_WORKER,
    TRAINJOB_NODE,
    HYDRA_2x4,
    JSRUN_2x4,
    MPIRUN_2x4,
    PALS_2x4,
    SRUN_2x4,
    cluster,
    srun_task,
)


def test_every_field_of_a_recognised_launcher_names_its_source() -> None:
    for env in (
        SRUN_2x4,
        SRUN_UNEVEN,
        SRUN_PRESERVE_ENV,
        {**MPIRUN_2x4, "MASTER_ADDR": "node01"},
        {**HYDRA_2x4, "MASTER_ADDR": "node01"},
        {**PALS_2x4, "MASTER_ADDR": "node01"},
        {**JSRUN_2x4, "MASTER_ADDR": "node01"},
        PYTORCHJOB_WORKER,
        TRAINJOB_NODE,
        TORCHRUN_WORKER,
    ):
        info = cluster(env)
        assert set(info.sources) >= {
            "rank",
            "world_size",
            "local_rank",
            "local_world_size",
            "node_rank",
        }, info


PRECEDENCE = {
    "mpirun inside an sbatch allocation: Open MPI, not the daemon step": (
        {**DAEMON_STEP, **MPIRUN_2x4, "MASTER_ADDR": "node01"},
        "openmpi",
        5,
    ),
    "mpiexec (Hydra) inside an allocation: Hydra, not the proxy step": (
        {**DAEMON_STEP, **HYDRA_2x4, "MASTER_ADDR": "node01"},
        "mpich",
        5,
    ),
    "srun --mpi=pmi2 started the task itself: Slurm": (
        {
            **srun_task(3, 4),
            "PMI_RANK": "3",
            "PMI_SIZE": "4",
            "PMI_FD": "5",
            "PMI_JOBID": "6000.2",
        },
        "slurm",
        3,
    ),
    "srun --mpi=pmix started the task itself: Slurm": (
        {**srun_task(3, 4), "PMIX_RANK": "3", "PMIX_NAMESPACE": "slurm.pmix.6000.2"},
        "slurm",
        3,
    ),
    "srun --mpi=cray_shasta started the task itself: Slurm": (
        {**srun_task(3, 4), "PALS_RANKID": "3", "PALS_NODEID": "0", "PALS_APID": "6000.2"},
        "slurm",
        3,
    ),
    "torchrun started by srun, one per node: torchrun": (
        {**srun_task(0, 1), **TORCHRUN_WORKER},
        "torchrun",
        5,
    ),
    "torchrun in a PyTorchJob pod: torchrun": (
        {**PYTORCHJOB_WORKER, **TORCHRUN_WORKER},
        "torchrun",
        5,
    ),
    "jsrun sets Open MPI's variables too: LSF": (
        {**JSRUN_2x4, "MASTER_ADDR": "a01n01"},
        "lsf",
        5,
    ),
    "mpirun's daemons started by PALS: Open MPI": (
        {**PALS_2x4, **MPIRUN_2x4, "MASTER_ADDR": "x1"},
        "openmpi",
        5,
    ),
    "Hydra's proxies started by PALS: PMI_RANK differs, MPICH": (
        {**{k: v for k, v in PALS_2x4.items() if not k.startswith("PMI_")}, "PALS_RANKID": "1"}
        | HYDRA_2x4
        | {"MASTER_ADDR": "x1"},
        "mpich",
        5,
    ),
    "Cray PMI beside PALS: PALS": ({**PALS_2x4, "MASTER_ADDR": "x1"}, "pals", 5),
    "RANK/WORLD_SIZE exported inside an srun step: Slurm": (
        {**SRUN_2x4, "RANK": "0", "WORLD_SIZE": "1"},
        "slurm",
        6,
    ),
    "PyTorchJob's RANK/WORLD_SIZE: Kubeflow, not env": (PYTORCHJOB_WORKER, "kubeflow", 2),
    "a process Lightning started in an salloc shell: Lightning, not env": (
        {**SALLOC_SHELL, "LOCAL_RANK": "1", "WORLD_SIZE": "2"},
        "lightning",
        1,
    ),
    "plain python in an salloc shell with env://: env": (
        {**SALLOC_SHELL, "RANK": "0", "WORLD_SIZE": "1"},
        "env",
        0,
    ),
}


@pytest.mark.parametrize("env, launcher, rank", PRECEDENCE.values(), ids=list(PRECEDENCE))
def test_the_launcher_that_started_the_process_wins_when_several_coexist(
    env: Mapping[str, str], launcher: str, rank: int
) -> None:
    info = cluster(env)
    assert (info.launcher, info.rank) == (launcher, rank)


def test_builtin_environments_are_asked_in_the_documented_order() -> None:
    assert [name for name, _ in BUILTIN] == [
        "torchrun",
        "ray",
        "deepspeed",
        "lsf",
        "openmpi",
        "mvapich",
        "pals",
        "mpich",
        "pmix",
        "skypilot",
        "slurm",
        "kubeflow",
        "lightning",
        "env",
        "single",
    ]


def test_builtin_environments_are_listed_and_blockable_as_plugins() -> None:
    registry = accelbackends.Registry(
        env={"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "1", "ACCELBACKENDS_DISABLE": "slurm"}
    )
    statuses = {p.name: p.status for p in registry.plugins}
    assert statuses["slurm"] == "blocked"
    assert all(statuses[name] == "active" for name, _ in BUILTIN if name != "slurm")


def test_a_blocked_slurm_environment_leaves_a_step_to_the_next_one() -> None:
    registry = accelbackends.Registry(
        env={
            "ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "1",
            "ACCELBACKENDS_DISABLE": "slurm",
            **SRUN_2x4,
        }
    )
    assert registry.cluster_environment().launcher == "single"
