"""Never a world smaller than the job: `accelbackends.job.worldcheck` against every scheduler's
variables, in `init()` and in `accelbackends info`, and no false alarm under the launchers."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping

import pytest
from conftest import fake_accelerator

import accelbackends
from accelbackends import ConfigError
from accelbackends.job import worldcheck
from accelbackends.plugin.types import AcceleratorStatus, ClusterInfo, Detection

from .varsets import (
    DAEMON_STEP,
    PYTORCHJOB_WORKER,
    RAY_TRAIN_WORKER,
    SALLOC_SHELL,
    SBATCH_SCRIPT,
    SKYPILOT_NODE_1,
    SRUN_PRESERVE_ENV,
    SRUN_UNEVEN,
    TORCHRUN_WORKER,
    TRAINJOB_GAUDI_TORCHRUN,
    TRAINJOB_NODE,
    HYDRA_2x4,
    JSRUN_2x4,
    MPIRUN_2x4,
    PALS_2x4,
    SRUN_2x4,
    srun_task,
)

Cli = Callable[..., "subprocess.CompletedProcess[str]"]

#: sbatch -N2 --ntasks-per-node=2 running `python train.py` itself: no srun step.
SBATCH_WITHOUT_SRUN = {
    **SBATCH_SCRIPT,
    "SLURM_NTASKS": "4",
    "SLURM_NPROCS": "4",
    "SLURM_TASKS_PER_NODE": "2(x2)",
    "SLURM_NTASKS_PER_NODE": "2",
}


def _registry(env: Mapping[str, str]) -> accelbackends.Registry:
    return accelbackends.Registry(env={"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "1", **env})


def verdict(env: Mapping[str, str], *, standalone: bool = False) -> worldcheck.Verdict:
    registry = _registry(env)
    return worldcheck.check(registry.cluster_environment(), registry.env, standalone=standalone)


#: Every launch the environment tests emulate, as the launcher really starts it: the world is the
#: job, so nothing may be reported.
AGREEING = {
    "srun task": SRUN_2x4,
    "srun, uneven nodes": SRUN_UNEVEN,
    "srun --preserve-env in a bigger allocation": SRUN_PRESERVE_ENV,
    "srun -n1 inside a 4-task allocation": {**SBATCH_WITHOUT_SRUN, **srun_task(0, 1)},
    "mpirun": {**MPIRUN_2x4, "MASTER_ADDR": "node01"},
    "mpirun inside an sbatch allocation": {**DAEMON_STEP, **MPIRUN_2x4, "MASTER_ADDR": "node01"},
    "mpirun on the batch host of an allocation (no step)": {
        **SBATCH_WITHOUT_SRUN,
        **MPIRUN_2x4,
        "MASTER_ADDR": "node01",
    },
    "Hydra mpiexec inside an allocation": {**DAEMON_STEP, **HYDRA_2x4, "MASTER_ADDR": "node01"},
    "srun --mpi=pmi2": {**srun_task(3, 4), "PMI_RANK": "3", "PMI_SIZE": "4", "PMI_FD": "5"},
    "PALS": {**PALS_2x4, "MASTER_ADDR": "x1"},
    "jsrun": {**JSRUN_2x4, "MASTER_ADDR": "a01n01"},
    "torchrun": TORCHRUN_WORKER,
    "torchrun started by srun, one per node": {
        **srun_task(0, 1),
        "SLURM_STEP_NUM_NODES": "2",
        "SLURM_STEP_NUM_TASKS": "2",
        **TORCHRUN_WORKER,
    },
    "torchrun under SkyPilot, --nnodes $SKYPILOT_NUM_NODES": {
        **SKYPILOT_NODE_1,
        "SKYPILOT_NUM_GPUS_PER_NODE": "4",
        **TORCHRUN_WORKER,
    },
    "SkyPilot, python train.py per one-GPU node": SKYPILOT_NODE_1,
    "PyTorchJob pod": PYTORCHJOB_WORKER,
    "TrainJob pod": TRAINJOB_NODE,
    "TrainJob pod with torchrun": TRAINJOB_GAUDI_TORCHRUN,
    "Ray Train worker inside an srun step": {**srun_task(0, 1), **RAY_TRAIN_WORKER},
    "Ray Train worker under SkyPilot": {**SKYPILOT_NODE_1, **RAY_TRAIN_WORKER},
    "plain python": {},
    "plain python in a one-task allocation": {
        **SBATCH_SCRIPT,
        "SLURM_NTASKS": "1",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NNODES": "1",
    },
    "a SkyPilot setup command": {
        k: v for k, v in SKYPILOT_NODE_1.items() if k != "SKYPILOT_NODE_RANK"
    },
}


@pytest.mark.parametrize("env", AGREEING.values(), ids=list(AGREEING))
def test_no_false_alarm_where_the_world_is_the_job(env: Mapping[str, str]) -> None:
    assert verdict(env).problem is None


#: A world smaller than the job: (the variables, what the error must name).
SMALLER = {
    "sbatch without srun": (
        SBATCH_WITHOUT_SRUN,
        ["SLURM_NTASKS=4", "SLURM_JOB_NUM_NODES=2", "launch with srun"],
    ),
    "salloc shell, python train.py": (SALLOC_SHELL, ["SLURM_NTASKS=8", "srun"]),
    "torchrun --standalone started by srun on two nodes": (
        {
            **srun_task(0, 2),
            "SLURM_STEP_NUM_NODES": "2",
            **TORCHRUN_WORKER,
            "WORLD_SIZE": "4",
            "RANK": "1",
            "GROUP_RANK": "0",
            "GROUP_WORLD_SIZE": "1",
        },
        ["torchrun's job spans 1 node", "SLURM_STEP_NUM_TASKS=2", "torchrun --nnodes 2"],
    ),
    "torchrun --nnodes 1 in a two-node sbatch script": (
        {
            **SBATCH_WITHOUT_SRUN,
            **TORCHRUN_WORKER,
            "WORLD_SIZE": "4",
            "RANK": "1",
            "GROUP_RANK": "0",
            "GROUP_WORLD_SIZE": "1",
        },
        ["SLURM_JOB_NUM_NODES=2", "torchrun --nnodes 2"],
    ),
    "torchrun --standalone under SkyPilot's two nodes": (
        {
            **SKYPILOT_NODE_1,
            **TORCHRUN_WORKER,
            "WORLD_SIZE": "4",
            "RANK": "1",
            "GROUP_RANK": "0",
            "GROUP_WORLD_SIZE": "1",
        },
        ["SKYPILOT_NUM_NODES=2", "torchrun --nnodes 2"],
    ),
    "SkyPilot node with 8 GPUs running one process": (
        {**SKYPILOT_NODE_1, "SKYPILOT_NUM_GPUS_PER_NODE": "8"},
        ["SKYPILOT_NUM_GPUS_PER_NODE=8", "this node runs 1", "--nproc-per-node"],
    ),
    "torchrun with fewer ranks than the pod's numProcPerNode": (
        {
            **TRAINJOB_GAUDI_TORCHRUN,
            "PET_NPROC_PER_NODE": "8",
            "LOCAL_WORLD_SIZE": "4",
            "WORLD_SIZE": "8",
            "RANK": "1",
            "LOCAL_RANK": "1",
        },
        ["PET_NPROC_PER_NODE=8", "this node runs 4"],
    ),
    "torchrun --nnodes 1 in a TrainJob of two pods": (
        {**TRAINJOB_GAUDI_TORCHRUN, "GROUP_WORLD_SIZE": "1", "WORLD_SIZE": "32"},
        ["PET_NNODES=2", "torchrun --nnodes 2"],
    ),
    "mpirun -np 2 torchrun --standalone": (
        {
            "OMPI_COMM_WORLD_SIZE": "2",
            **TORCHRUN_WORKER,
            "WORLD_SIZE": "4",
            "RANK": "1",
            "GROUP_RANK": "0",
            "GROUP_WORLD_SIZE": "1",
        },
        ["OMPI_COMM_WORLD_SIZE=2", "torchrun --nnodes 2"],
    ),
    "SkyPilot plugin blocked: single beside SKYPILOT_NUM_NODES": (
        {**SKYPILOT_NODE_1, "ACCELBACKENDS_DISABLE": "skypilot"},
        ["SKYPILOT_NUM_NODES=2"],
    ),
    "a stale WORLD_SIZE beside srun's step": (
        {**SRUN_2x4, "WORLD_SIZE": "2"},
        ["WORLD_SIZE='2'", "SLURM_STEP_NUM_TASKS=8"],
    ),
}


@pytest.mark.parametrize("env, named", SMALLER.values(), ids=list(SMALLER))
def test_a_world_smaller_than_the_job_is_refused_naming_both_sides(
    env: Mapping[str, str], named: list[str]
) -> None:
    problem = verdict(env).problem
    assert problem is not None
    for text in named:
        assert text in problem, problem


def test_standalone_says_a_smaller_world_is_meant_but_not_a_contradicting_environment() -> None:
    assert verdict(SBATCH_WITHOUT_SRUN, standalone=True).problem is None
    assert verdict({**SRUN_2x4, "WORLD_SIZE": "2"}, standalone=True).problem is not None


def test_standalone_comes_from_the_argument_before_the_variable() -> None:
    env = {"ACCELBACKENDS_STANDALONE": "yes"}
    assert worldcheck.standalone(None, env) is True
    assert worldcheck.standalone(False, env) is False
    with pytest.raises(ConfigError, match="ACCELBACKENDS_STANDALONE='maybe'"):
        worldcheck.standalone(None, {"ACCELBACKENDS_STANDALONE": "maybe"})
    with pytest.raises(ConfigError, match="standalone='yes'"):
        worldcheck.standalone("yes", {})  # type: ignore[arg-type]


def test_under_ray_the_outer_launchers_variables_are_not_compared() -> None:
    found = verdict({**SBATCH_WITHOUT_SRUN, **RAY_TRAIN_WORKER})
    assert found.problem is None
    assert "daemons" in found.skipped


def _status(name: str, devices: int, device_type: str = "hpu") -> AcceleratorStatus:
    spec = fake_accelerator(name, devices=devices)
    spec = type(spec)(**{**spec.__dict__, "device_type": device_type})
    return AcceleratorStatus(spec, "test", "test", "0", Detection(True, devices, "fake"))


def _cluster(env: Mapping[str, str]) -> ClusterInfo:
    return _registry(env).cluster_environment()


def test_kubeflow_counting_cpus_for_a_gaudi_pod_is_refused_naming_devices_and_fix() -> None:
    env = {**_registry(TRAINJOB_GAUDI_TORCHRUN).env}
    problem = worldcheck.check_devices(_cluster(env), _status("hpu", 8), env)
    assert problem is not None
    assert "PET_NPROC_PER_NODE=32" in problem and "8 visible devices" in problem
    assert "numProcPerNode: 8" in problem


def test_kubeflow_nproc_within_the_devices_passes() -> None:
    env = {
        **TRAINJOB_GAUDI_TORCHRUN,
        "PET_NPROC_PER_NODE": "8",
        "LOCAL_WORLD_SIZE": "8",
        "WORLD_SIZE": "16",
        "LOCAL_RANK": "1",
        "RANK": "1",
    }
    assert worldcheck.check_devices(_cluster(env), _status("hpu", 8), env) is None
    assert worldcheck.check_devices(_cluster(env), _status("cpu", 1, "cpu"), env) is None


def test_kubeflow_auto_with_one_process_per_pod_and_several_devices_is_refused() -> None:
    env = {**TRAINJOB_NODE, "PET_NPROC_PER_NODE": "auto"}
    problem = worldcheck.check_devices(_cluster(env), _status("cuda", 4, "cuda"), env)
    assert problem is not None and "4 cuda devices" in problem and "torchrun" in problem
    assert worldcheck.check_devices(_cluster(env), _status("cuda", 1, "cuda"), env) is None
    assert (
        worldcheck.check_devices(_cluster(env), _status("cuda", 4, "cuda"), env, standalone=True)
        is None
    )


def test_init_refuses_the_forgotten_srun_before_importing_torch() -> None:
    with pytest.raises(ConfigError, match="launch with srun"):
        accelbackends.init(registry=_registry(SBATCH_WITHOUT_SRUN))


def test_init_with_standalone_runs_the_one_process_it_was_asked_for() -> None:
    with accelbackends.distributed(registry=_registry(SBATCH_WITHOUT_SRUN), standalone=True) as c:
        assert (c.launcher, c.world_size) == ("single", 1)


def _info(cli: Cli, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return cli("info", "--json", env={"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "1", **env})


def test_info_shows_the_same_verdict_and_exits_2(cli: Cli) -> None:
    done = _info(cli, SBATCH_WITHOUT_SRUN)
    assert done.returncode == 2, done.stderr
    check = json.loads(done.stdout)["cluster"]["world_check"]
    assert "launch with srun" in check["error"]
    assert check["signals"][0]["variables"] == "SLURM_NTASKS=4, SLURM_JOB_NUM_NODES=2"


def test_info_lists_the_signals_that_agree(cli: Cli) -> None:
    done = _info(cli, {**SKYPILOT_NODE_1, "SKYPILOT_NUM_GPUS_PER_NODE": "0"})
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["cluster"]
    assert report["launcher"] == "skypilot"
    assert report["world_check"]["error"] is None
    assert report["world_check"]["signals"][0]["scheduler"] == "SkyPilot's run command"


def test_gpus_skypilot_reserved_beside_a_cpu_selection_are_refused_not_agreed(cli: Cli) -> None:
    # SKYPILOT_NODE_1 reserves one GPU per node; this machine's selection is the CPU.
    done = _info(cli, SKYPILOT_NODE_1)
    assert done.returncode == 2, done.stdout
    error = json.loads(done.stdout)["cluster"]["world_check"]["error"]
    assert "SKYPILOT_NUM_GPUS_PER_NODE=1" in error
    assert "devices it never uses" in error
    assert "selected the cpu accelerator" in error


def test_init_refuses_gpus_skypilot_reserved_beside_a_cpu_selection() -> None:
    with pytest.raises(ConfigError, match="devices it never uses"):
        accelbackends.init(
            registry=_registry({**SKYPILOT_NODE_1, "ACCELBACKENDS_ACCELERATOR": "cpu"})
        )


#: What `accelerate launch --num_processes 2` (no --multi_gpu) gives its one process (Accelerate
#: 1.15, prepare_simple_launcher_cmd_env); with --num_processes 1 it sets no MASTER_*.
ACCELERATE_ONE_PROCESS_FOR_TWO = {
    "ACCELERATE_USE_CPU": "False",
    "ACCELERATE_MIXED_PRECISION": "no",
    "ACCELERATE_DYNAMO_BACKEND": "NO",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}


def test_accelerate_launch_starting_one_of_several_processes_is_refused_naming_the_fix() -> None:
    problem = verdict(ACCELERATE_ONE_PROCESS_FOR_TWO).problem
    assert problem is not None
    assert "a world of 1" in problem and "accelerate launch" in problem, problem
    assert "MASTER_PORT='29500'" in problem and "--multi_gpu" in problem, problem


def test_accelerate_launch_with_one_process_or_under_torchrun_is_not_refused() -> None:
    one = {k: v for k, v in ACCELERATE_ONE_PROCESS_FOR_TWO.items() if not k.startswith("MASTER")}
    assert verdict(one).problem is None
    assert verdict(ACCELERATE_ONE_PROCESS_FOR_TWO, standalone=True).problem is None
    torchrun = {
        **ACCELERATE_ONE_PROCESS_FOR_TWO,
        **{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"},
        **{"GROUP_RANK": "0", "TORCHELASTIC_RUN_ID": "x", "ROLE_RANK": "0"},
    }
    assert verdict(torchrun).problem is None


def test_the_fix_for_python_on_a_node_of_several_gpus_is_not_the_command_that_failed() -> None:
    env = {**SKYPILOT_NODE_1, "SKYPILOT_NUM_GPUS_PER_NODE": "8"}
    problem = verdict(env).problem
    assert problem is not None
    fix = problem.split("Fix: ", 1)[1]
    assert fix.startswith("make the run command `torchrun --nnodes"), fix
    assert "python train.py" not in fix
