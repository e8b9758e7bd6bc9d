"""Each launcher's real variable sets for one rank, and the helpers every environment test uses.

The variable sets are what each launcher documents (or its source sets) for one rank of a job;
the comment above each says which launch produced it (the dumps captured from real launchers are
in the docs' launcher pages). Every case builds a fresh registry with an injected environment:
nothing here touches ``os.environ``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import accelbackends
from accelbackends import ClusterInfo
from accelbackends.environments._common import port_from_id

#: name -> (a launcher's variables, the fields expected from them)
CaseTable = dict[str, tuple[Mapping[str, str], dict[str, Any]]]


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


def check_case(env: Mapping[str, str], expected: dict[str, Any]) -> None:
    got = fields(cluster(env))
    assert {key: got[key] for key in expected} == expected


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

#: torch 2.15's `torchrun --nnodes 2 --nproc-per-node 8 --virtual-local-rank` on node 1, worker 3
#: (local_elastic_agent._set_local_rank_env): LOCAL_RANK=0 in every worker, its own GPU visible.
TORCHRUN_VIRTUAL_WORKER = {
    **TORCHRUN_WORKER,
    "RANK": "11",
    "WORLD_SIZE": "16",
    "LOCAL_RANK": "0",
    "LOCAL_WORLD_SIZE": "8",
    "GROUP_RANK": "1",
    "ROLE_RANK": "11",
    "GROUP_WORLD_SIZE": "2",
    "CUDA_VISIBLE_DEVICES": "3",
}

#: DeepSpeed 0.19.8's `deepspeed --hostfile hostfile` (two nodes of 8 GPUs, pdsh runner), the
#: worker launcher/launch.py starts as rank 11 on node 1: no LOCAL_WORLD_SIZE, no NODE_RANK.
DEEPSPEED_2x8 = {
    "MASTER_ADDR": "node01",
    "MASTER_PORT": "29500",
    "WORLD_SIZE": "16",
    "CROSS_RANK": "1",
    "CROSS_SIZE": "2",
    "LOCAL_SIZE": "8",
    "RANK": "11",
    "LOCAL_RANK": "3",
    "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
    "PDSH_RCMD_TYPE": "ssh",
}

SLURM_PORT_200505 = port_from_id("200505.0")

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


def srun_task(rank: int, size: int) -> dict[str, str]:
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


#: A SkyPilot task with `num_nodes: 2` whose run command is `python train.py`, on node 1.
SKYPILOT_NODE_1 = {
    "SKYPILOT_NODE_RANK": "1",
    "SKYPILOT_NUM_NODES": "2",
    "SKYPILOT_NODE_IPS": "10.128.0.7\n10.128.0.9\n",
    "SKYPILOT_NUM_GPUS_PER_NODE": "1",
    "SKYPILOT_TASK_ID": "sky-2026-11-24-08-00-00-123456_mycluster_3",
    "SKYPILOT_CLUSTER_INFO": '{"cluster_name": "mycluster", "cloud": "GCP"}',
}

#: A Ray Train worker (Ray 2.60, TorchTrainer with two CPU workers on one node), rank 1, as
#: accelbackends' TorchConfig leaves it: no MASTER_ADDR on one node, rank 0's free port.
RAY_TRAIN_WORKER = {
    "RAY_JOB_ID": "01000000",
    "RAY_RAYLET_PID": "8794",
    "RAY_CLIENT_MODE": "0",
    "RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "NODE_RANK": "0",
    "MASTER_PORT": "36465",
    "OMP_NUM_THREADS": "1",
}

#: A TrainJob pod of Kubeflow Trainer v2 whose numProcPerNode 'auto' the runtime resolved to the
#: pod's CPU count (resourcesPerNode: cpu 32 and habana.ai/gaudi 8: no "gpu" in a name), with
#: torchrun as the command: worker 9 of torchrun's 32 on pod 0.
TRAINJOB_GAUDI_TORCHRUN = {
    "PET_NNODES": "2",
    "PET_NPROC_PER_NODE": "32",
    "PET_NODE_RANK": "0",
    "PET_MASTER_ADDR": "llm-node-0-0.llm",
    "PET_MASTER_PORT": "29500",
    "TORCHELASTIC_RUN_ID": "none",
    "TORCHELASTIC_RESTART_COUNT": "0",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
    "RANK": "9",
    "WORLD_SIZE": "64",
    "LOCAL_RANK": "9",
    "LOCAL_WORLD_SIZE": "32",
    "GROUP_RANK": "0",
    "GROUP_WORLD_SIZE": "2",
    "MASTER_ADDR": "llm-node-0-0.llm",
    "MASTER_PORT": "29500",
}
