"""Cluster environments: each launcher's real variable sets, precedence when launchers nest,
the user's MASTER_ADDR/MASTER_PORT, and errors that name the variable.

The variable sets are what each launcher documents (or its source sets) for one rank of a job;
the comment above each says which launch produced it. Every case builds a fresh registry with an
injected environment: nothing here touches ``os.environ``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

import accelbackends
from accelbackends import ClusterInfo, ConfigError
from accelbackends.environments import BUILTIN
from accelbackends.environments._common import port_from_id


def cluster(env: Mapping[str, str]) -> ClusterInfo:
    """The cluster a fresh registry recognises from ``env`` alone (no third-party plugins)."""
    registry = accelbackends.Registry(env={"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "1", **env})
    return registry.cluster_environment()


def fields(info: ClusterInfo) -> dict[str, Any]:
    return {
        "launcher": info.launcher,
        "rank": info.rank,
        "world_size": info.world_size,
        "local_rank": info.local_rank,
        "local_world_size": info.local_world_size,
        "node_rank": info.node_rank,
        "master_addr": info.master_addr,
        "master_port": info.master_port,
    }


# -- real variable sets ---------------------------------------------------------------------------

#: `sbatch -N 2 --ntasks-per-node 4` then `srun python train.py`: task 6 (node 1, local 2).
SRUN_2x4 = {
    "SLURM_CLUSTER_NAME": "ada",
    "SLURM_JOB_ID": "200505",
    "SLURM_JOBID": "200505",
    "SLURM_JOB_NAME": "train",
    "SLURM_JOB_NODELIST": "gnode[10,20]",
    "SLURM_NODELIST": "gnode[10,20]",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NNODES": "2",
    "SLURM_JOB_CPUS_PER_NODE": "32(x2)",
    "SLURM_NTASKS": "8",
    "SLURM_NPROCS": "8",
    "SLURM_NTASKS_PER_NODE": "4",
    "SLURM_TASKS_PER_NODE": "4(x2)",
    "SLURM_STEP_ID": "0",
    "SLURM_STEPID": "0",
    "SLURM_STEP_NODELIST": "gnode[10,20]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NUM_TASKS": "8",
    "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
    "SLURM_STEP_LAUNCHER_PORT": "43071",
    "SLURM_SRUN_COMM_PORT": "43071",
    "SLURM_PROCID": "6",
    "SLURM_LOCALID": "2",
    "SLURM_NODEID": "1",
    "SLURM_GTIDS": "4,5,6,7",
    "SLURMD_NODENAME": "gnode20",
    "SLURM_TOPOLOGY_ADDR": "gnode20",
    "SLURM_CPUS_ON_NODE": "32",
}

#: `srun -n 7 -N 4` (Slurm spreads it 2,2,2,1): the task on the last node.
SRUN_UNEVEN = {
    "SLURM_JOB_ID": "31337",
    "SLURM_JOB_NODELIST": "rack[1-2]-n[07-08]",
    "SLURM_NNODES": "4",
    "SLURM_NTASKS": "7",
    "SLURM_TASKS_PER_NODE": "2(x3),1",
    "SLURM_STEP_ID": "3",
    "SLURM_STEP_NODELIST": "rack[1-2]-n[07-08]",
    "SLURM_STEP_NUM_NODES": "4",
    "SLURM_STEP_NUM_TASKS": "7",
    "SLURM_STEP_TASKS_PER_NODE": "2(x3),1",
    "SLURM_PROCID": "6",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "3",
}

#: `srun --preserve-env -N 2 -n 2` inside an 8-task allocation: SLURM_NTASKS and
#: SLURM_TASKS_PER_NODE stay the job's, the step's own variables describe the step.
SRUN_PRESERVE_ENV = {
    "SLURM_JOB_ID": "777",
    "SLURM_JOB_NODELIST": "node[01-04]",
    "SLURM_NNODES": "4",
    "SLURM_NTASKS": "8",
    "SLURM_TASKS_PER_NODE": "2(x4)",
    "SLURM_STEP_ID": "1",
    "SLURM_STEP_NODELIST": "node[03-04]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "1",
}

#: The shell `salloc -N 2` opens: the job's variables, no step.
SALLOC_SHELL = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NODELIST": "node[01-02]",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NNODES": "2",
    "SLURM_NTASKS": "8",
    "SLURM_TASKS_PER_NODE": "4(x2)",
    "SLURM_NTASKS_PER_NODE": "4",
    "SLURM_SUBMIT_HOST": "login1",
}

#: An sbatch script's own environment: slurmstepd adds SLURM_PROCID=0 and friends, but the batch
#: "step" is no srun launch.
SBATCH_SCRIPT = {
    **SALLOC_SHELL,
    "ENVIRONMENT": "BATCH",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
}

#: `mpirun -np 8 --map-by ppr:4:node` over two nodes (Open MPI 4/5), rank 5.
MPIRUN_2x4 = {
    "OMPI_COMM_WORLD_RANK": "5",
    "OMPI_COMM_WORLD_SIZE": "8",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
    "OMPI_COMM_WORLD_NODE_RANK": "1",
    "OMPI_UNIVERSE_SIZE": "8",
    "PMIX_RANK": "5",
    "PMIX_NAMESPACE": "prterun-login1-81234@1",
    "PMIX_SERVER_URI41": "prterun-login1-81234@0.0;tcp4://10.0.0.5:41235",
}

#: `mpiexec -n 8 -ppn 4` (MPICH or Intel MPI Hydra), rank 5.
HYDRA_2x4 = {
    "PMI_RANK": "5",
    "PMI_SIZE": "8",
    "PMI_FD": "6",
    "MPI_LOCALRANKID": "1",
    "MPI_LOCALNRANKS": "4",
    "MPIR_CVAR_CH3_INTERFACE_HOSTNAME": "node02",
}

#: HPE Cray `mpiexec -n 8 --ppn 4` under PBS (PALS with Cray PMI), rank 5.
PALS_2x4 = {
    "PALS_RANKID": "5",
    "PALS_NODEID": "1",
    "PALS_LOCAL_RANKID": "1",
    "PALS_LOCAL_SIZE": "4",
    "PALS_APID": "8f7e2c4a-1b3d-4f5e-9a8b-7c6d5e4f3a2b",
    "PALS_DEPTH": "1",
    "PALS_SPOOL_DIR": "/var/run/palsd/8f7e2c4a",
    "PMI_RANK": "5",
    "PMI_SIZE": "8",
    "PMI_LOCAL_RANK": "1",
    "PMI_LOCAL_SIZE": "4",
    "PBS_JOBID": "123456.pbs01",
}

#: `jsrun -n 2 -a 4` on an LSF/CSM system (Summit-style), rank 5. jsrun sets Open MPI's
#: variables too, for Spectrum MPI.
JSRUN_2x4 = {
    "JSM_NAMESPACE_RANK": "5",
    "JSM_NAMESPACE_SIZE": "8",
    "JSM_NAMESPACE_LOCAL_RANK": "1",
    "JSM_NAMESPACE_LOCAL_SIZE": "4",
    "OMPI_COMM_WORLD_RANK": "5",
    "OMPI_COMM_WORLD_SIZE": "8",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
    "PMIX_RANK": "5",
    "LSB_JOBID": "1234567",
    "LSB_MCPU_HOSTS": "batch3 1 a01n01 42 a01n02 42",
}

#: A PyTorchJob worker pod (training-operator v1, Master + 3 Workers), worker 1.
PYTORCHJOB_WORKER = {
    "MASTER_ADDR": "mnist-master-0",
    "MASTER_PORT": "23456",
    "WORLD_SIZE": "4",
    "RANK": "2",
    "PET_MASTER_ADDR": "mnist-master-0",
    "PET_MASTER_PORT": "23456",
    "PET_NNODES": "4",
    "PET_NODE_RANK": "2",
    "PET_NPROC_PER_NODE": "1",
    "PYTHONUNBUFFERED": "0",
}

#: A TrainJob pod (Kubeflow Trainer v2) with numProcPerNode 1: only the PET_* variables.
TRAINJOB_NODE = {
    "PET_NNODES": "2",
    "PET_NPROC_PER_NODE": "1",
    "PET_NODE_RANK": "1",
    "PET_MASTER_ADDR": "mnist-node-0-0.mnist",
    "PET_MASTER_PORT": "29500",
}

#: A torchrun worker: `torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d ...`, rank 5.
TORCHRUN_WORKER = {
    "TORCHELASTIC_RUN_ID": "job7",
    "TORCHELASTIC_RESTART_COUNT": "0",
    "TORCHELASTIC_MAX_RESTARTS": "0",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
    "RANK": "5",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "1",
    "ROLE_RANK": "5",
    "GROUP_WORLD_SIZE": "2",
    "MASTER_ADDR": "node01",
    "MASTER_PORT": "39001",
}


SLURM_PORT_200505 = port_from_id("200505.0")

CASES: dict[str, tuple[Mapping[str, str], dict[str, Any]]] = {
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
    "mpirun 2 nodes x 4 with MASTER_ADDR": (
        {**MPIRUN_2x4, "MASTER_ADDR": "node01"},
        dict(
            launcher="openmpi",
            rank=5,
            world_size=8,
            local_rank=1,
            local_world_size=4,
            node_rank=1,
            master_addr="node01",
            master_port=port_from_id("prterun-login1-81234@1"),
        ),
    ),
    "mpirun on one node: loopback": (
        {
            "OMPI_COMM_WORLD_RANK": "2",
            "OMPI_COMM_WORLD_SIZE": "4",
            "OMPI_COMM_WORLD_LOCAL_RANK": "2",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
        },
        dict(
            launcher="openmpi",
            rank=2,
            world_size=4,
            local_rank=2,
            local_world_size=4,
            node_rank=0,
            master_addr="127.0.0.1",
            master_port=29500,
        ),
    ),
    "mpiexec (Hydra) 2 nodes x 4": (
        {**HYDRA_2x4, "MASTER_ADDR": "node01", "MASTER_PORT": "29511"},
        dict(
            launcher="mpich",
            rank=5,
            world_size=8,
            local_rank=1,
            local_world_size=4,
            node_rank=1,
            master_addr="node01",
            master_port=29511,
        ),
    ),
    "Cray PALS mpiexec under PBS": (
        {**PALS_2x4, "MASTER_ADDR": "x3006c0s13b0n0"},
        dict(
            launcher="pals",
            rank=5,
            world_size=8,
            local_rank=1,
            local_world_size=4,
            node_rank=1,
            master_addr="x3006c0s13b0n0",
            master_port=port_from_id(PALS_2x4["PALS_APID"]),
        ),
    ),
    "PMIx launcher with WORLD_SIZE passed along": (
        {
            "PMIX_RANK": "3",
            "PMIX_NAMESPACE": "prterun-host-99@1",
            "WORLD_SIZE": "4",
            "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "host0",
        },
        dict(
            launcher="pmix",
            rank=3,
            world_size=4,
            local_rank=0,
            local_world_size=1,
            node_rank=3,
            master_addr="host0",
            master_port=port_from_id("prterun-host-99@1"),
        ),
    ),
    "PyTorchJob worker pod": (
        PYTORCHJOB_WORKER,
        dict(
            launcher="kubeflow",
            rank=2,
            world_size=4,
            local_rank=0,
            local_world_size=1,
            node_rank=2,
            master_addr="mnist-master-0",
            master_port=23456,
        ),
    ),
    "TrainJob pod, PET_* only": (
        TRAINJOB_NODE,
        dict(
            launcher="kubeflow",
            rank=1,
            world_size=2,
            local_rank=0,
            local_world_size=1,
            node_rank=1,
            master_addr="mnist-node-0-0.mnist",
            master_port=29500,
        ),
    ),
    "torchrun worker": (
        TORCHRUN_WORKER,
        dict(
            launcher="torchrun",
            rank=5,
            world_size=8,
            local_rank=1,
            local_world_size=4,
            node_rank=1,
            master_addr="node01",
            master_port=39001,
        ),
    ),
    "plain env://": (
        {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"},
        dict(launcher="env", rank=1, world_size=2, master_addr="10.0.0.1", master_port=29500),
    ),
    "nothing": ({"HOME": "/root"}, dict(launcher="single", rank=0, world_size=1)),
}


@pytest.mark.parametrize("env, expected", CASES.values(), ids=list(CASES))
def test_each_launchers_documented_variables_give_the_right_cluster(
    env: Mapping[str, str], expected: dict[str, Any]
) -> None:
    got = fields(cluster(env))
    assert {key: got[key] for key in expected} == expected


def test_jsrun_rank_0_runs_on_the_first_compute_host_of_the_rank_file(tmp_path: Path) -> None:
    rankfile = tmp_path / "rankfile"
    rankfile.write_text("batch3\n" + "a01n01\n" * 42 + "a01n02\n" * 42)
    info = cluster({**JSRUN_2x4, "LSB_DJOB_RANKFILE": str(rankfile)})
    assert fields(info) == dict(
        launcher="lsf",
        rank=5,
        world_size=8,
        local_rank=1,
        local_world_size=4,
        node_rank=1,
        master_addr="a01n01",
        master_port=port_from_id("1234567"),
    )
    assert info.sources["master_addr"] == "LSB_DJOB_RANKFILE (first compute host)"
    assert info.sources["master_port"].startswith("LSB_JOBID")


def test_unreadable_lsf_rank_file_names_the_variable_and_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-rankfile"
    with pytest.raises(ConfigError, match=r"LSB_DJOB_RANKFILE=.*no-such-rankfile"):
        cluster({**JSRUN_2x4, "LSB_DJOB_RANKFILE": str(missing)})


def test_every_field_of_a_recognised_launcher_names_its_source() -> None:
    envs = [env for env, expected in CASES.values() if expected["launcher"] not in ("single",)]
    for env in envs:
        info = cluster(env)
        assert set(info.sources) >= {
            "rank",
            "world_size",
            "local_rank",
            "local_world_size",
            "node_rank",
        }, info


def test_slurm_sources_name_the_variables_info_shows() -> None:
    assert cluster(SRUN_2x4).sources == {
        "rank": "SLURM_PROCID",
        "world_size": "SLURM_STEP_NUM_TASKS",
        "local_rank": "SLURM_LOCALID",
        "node_rank": "SLURM_NODEID",
        "local_world_size": "SLURM_STEP_TASKS_PER_NODE[SLURM_NODEID]",
        "master_addr": "SLURM_STEP_NODELIST (first host)",
        "master_port": "SLURM_JOB_ID.SLURM_STEP_ID (hashed into 20000-29999)",
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


# -- precedence -----------------------------------------------------------------------------------

#: What a rank inherits from the srun step that started mpirun's daemons (one per remote node):
#: SLURM_PROCID counts daemons, not ranks.
DAEMON_STEP = {
    "SLURM_JOB_ID": "5000",
    "SLURM_JOB_NODELIST": "node[01-02]",
    "SLURM_STEP_ID": "0",
    "SLURM_STEP_NODELIST": "node02",
    "SLURM_STEP_NUM_NODES": "1",
    "SLURM_STEP_NUM_TASKS": "1",
    "SLURM_STEP_TASKS_PER_NODE": "1",
    "SLURM_NTASKS": "1",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
}


def _srun_task(rank: int, size: int) -> dict[str, str]:
    """srun's own variables for task ``rank`` of a one-node step of ``size`` tasks."""
    return {
        "SLURM_JOB_ID": "6000",
        "SLURM_JOB_NODELIST": "node07",
        "SLURM_STEP_ID": "2",
        "SLURM_STEP_NODELIST": "node07",
        "SLURM_STEP_NUM_NODES": "1",
        "SLURM_STEP_NUM_TASKS": str(size),
        "SLURM_STEP_TASKS_PER_NODE": str(size),
        "SLURM_NTASKS": str(size),
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank),
        "SLURM_NODEID": "0",
    }


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
            **_srun_task(3, 4),
            "PMI_RANK": "3",
            "PMI_SIZE": "4",
            "PMI_FD": "5",
            "PMI_JOBID": "6000.2",
        },
        "slurm",
        3,
    ),
    "srun --mpi=pmix started the task itself: Slurm": (
        {**_srun_task(3, 4), "PMIX_RANK": "3", "PMIX_NAMESPACE": "slurm.pmix.6000.2"},
        "slurm",
        3,
    ),
    "srun --mpi=cray_shasta started the task itself: Slurm": (
        {**_srun_task(3, 4), "PALS_RANKID": "3", "PALS_NODEID": "0", "PALS_APID": "6000.2"},
        "slurm",
        3,
    ),
    "torchrun started by srun, one per node: torchrun": (
        {**_srun_task(0, 1), **TORCHRUN_WORKER},
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
        "lsf",
        "openmpi",
        "pals",
        "mpich",
        "pmix",
        "slurm",
        "kubeflow",
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


@pytest.mark.parametrize(
    "env, launcher, hint",
    [
        (MPIRUN_2x4, "openmpi", "mpirun -x MASTER_ADDR"),
        (HYDRA_2x4, "mpich", "mpiexec -genv MASTER_ADDR"),
        (PALS_2x4, "pals", "PBS_NODEFILE"),
        (JSRUN_2x4, "lsf", "LSB_DJOB_RANKFILE"),
    ],
    ids=["openmpi", "mpich", "pals", "lsf"],
)
def test_mpi_launchers_across_nodes_without_master_addr_say_to_set_it(
    env: Mapping[str, str], launcher: str, hint: str
) -> None:
    with pytest.raises(ConfigError, match="set MASTER_ADDR") as caught:
        cluster(env)
    assert f"the {launcher} launcher does not say where rank 0 runs" in str(caught.value)
    assert hint in str(caught.value)


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
        ({**PYTORCHJOB_WORKER, "PET_NPROC_PER_NODE": "auto"}, "torchrun"),
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
        "pytorchjob-nproc-auto-without-torchrun",
        "trainjob-elastic-without-torchrun",
        "srun-without-tasks-per-node",
    ],
)
def test_missing_launcher_variables_say_what_to_set(env: Mapping[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        cluster(env)


# -- accelbackends info ---------------------------------------------------------------------------


Cli = Callable[..., "subprocess.CompletedProcess[str]"]


def _info(cli: Cli, env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return cli("info", *args, env={"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "1", **env})


def test_info_json_reports_the_cluster_fields_and_their_variables_under_srun(cli: Cli) -> None:
    done = _info(cli, SRUN_2x4, "--json")
    assert done.returncode == 0, done.stderr
    reported = json.loads(done.stdout)["cluster"]
    assert reported["launcher"] == "slurm"
    assert (reported["rank"], reported["world_size"], reported["local_world_size"]) == (6, 8, 4)
    assert reported["master_addr"] == "gnode10"
    assert reported["sources"]["local_world_size"] == "SLURM_STEP_TASKS_PER_NODE[SLURM_NODEID]"


def test_info_text_shows_each_fields_variable(cli: Cli) -> None:
    done = _info(cli, SRUN_UNEVEN)
    assert done.returncode == 0, done.stderr
    assert "cluster: slurm" in done.stdout
    assert "from SLURM_STEP_NODELIST (first host)" in done.stdout
    assert "from SLURM_PROCID" in done.stdout


@pytest.mark.parametrize(
    "env, var",
    [
        ({**SRUN_2x4, "SLURM_PROCID": "six"}, "SLURM_PROCID"),
        ({**MPIRUN_2x4, "OMPI_COMM_WORLD_LOCAL_SIZE": "4x"}, "OMPI_COMM_WORLD_LOCAL_SIZE"),
        ({**SRUN_2x4, "SLURM_STEP_NODELIST": "gnode[1"}, "SLURM_STEP_NODELIST"),
    ],
    ids=["slurm", "openmpi", "hostlist"],
)
def test_info_exits_2_naming_the_bad_variable_without_a_traceback(
    cli: Cli, env: Mapping[str, str], var: str
) -> None:
    done = _info(cli, env)
    assert done.returncode == 2
    assert var in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("accelbackends: error:")


def test_environment_plugins_never_import_torch() -> None:
    code = (
        "import sys, accelbackends\n"
        "r = accelbackends.Registry(env={'ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD': '1', "
        "'SLURM_STEP_ID': '0', 'SLURM_PROCID': '0', 'SLURM_NTASKS': '1', "
        "'SLURM_LOCALID': '0', 'SLURM_NODEID': '0', 'SLURM_TASKS_PER_NODE': '1'})\n"
        "r.cluster_environment()\n"
        "import accelbackends.environments as e, importlib\n"
        "for _, module in e.BUILTIN: importlib.import_module(module)\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
