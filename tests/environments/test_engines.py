"""The engines' environments: SkyPilot's run command, Ray Train's workers, Kubeflow Trainer v2's
TrainJob pods, each from the variables the engine sets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from accelbackends import ConfigError
from accelbackends.environments._common import port_from_id

from .varsets import (
    RAY_TRAIN_WORKER,
    SKYPILOT_NODE_1,
    TORCHRUN_WORKER,
    TRAINJOB_GAUDI_TORCHRUN,
    TRAINJOB_NODE,
    CaseTable,
    check_case,
    cluster,
    srun_task,
)

CASES: CaseTable = {
    "SkyPilot node 1 of 2, python train.py": (
        SKYPILOT_NODE_1,
        dict(
            launcher="skypilot",
            rank=1,
            world_size=2,
            local_rank=0,
            local_world_size=1,
            node_rank=1,
            master_addr="10.128.0.7",
            master_port=port_from_id(SKYPILOT_NODE_1["SKYPILOT_TASK_ID"]),
        ),
    ),
    "SkyPilot with one node: one process, no network": (
        {
            **SKYPILOT_NODE_1,
            "SKYPILOT_NODE_RANK": "0",
            "SKYPILOT_NUM_NODES": "1",
            "SKYPILOT_NODE_IPS": "10.128.0.7",
        },
        dict(launcher="skypilot", rank=0, world_size=1, master_addr=None, master_port=None),
    ),
    "torchrun under SkyPilot stays torchrun": (
        {**SKYPILOT_NODE_1, **TORCHRUN_WORKER},
        dict(launcher="torchrun", rank=5, world_size=8, local_world_size=4),
    ),
    "a launcher inside SkyPilot's run command set WORLD_SIZE: env": (
        {
            **SKYPILOT_NODE_1,
            "RANK": "13",
            "WORLD_SIZE": "16",
            "MASTER_ADDR": "10.128.0.7",
            "MASTER_PORT": "29500",
        },
        dict(launcher="env", rank=13, world_size=16),
    ),
    "Ray Train worker on one node: loopback": (
        RAY_TRAIN_WORKER,
        dict(
            launcher="ray",
            rank=1,
            world_size=2,
            local_rank=1,
            local_world_size=2,
            node_rank=0,
            master_addr="127.0.0.1",
            master_port=36465,
        ),
    ),
    "Ray Train worker inside an srun step (ray start under Slurm): ray": (
        {**srun_task(0, 1), **RAY_TRAIN_WORKER},
        dict(launcher="ray", rank=1, world_size=2),
    ),
    "Ray Train workers on two nodes: rank 0's node address": (
        {
            **RAY_TRAIN_WORKER,
            "RANK": "3",
            "WORLD_SIZE": "4",
            "NODE_RANK": "1",
            "MASTER_ADDR": "10.0.0.5",
        },
        dict(launcher="ray", rank=3, world_size=4, node_rank=1, master_addr="10.0.0.5"),
    ),
    "TrainJob pod without torchrun, numProcPerNode 1": (
        TRAINJOB_NODE,
        dict(launcher="kubeflow", rank=1, world_size=2, master_addr="mnist-node-0-0.mnist"),
    ),
    "TrainJob pod without torchrun, numProcPerNode auto": (
        {**TRAINJOB_NODE, "PET_NPROC_PER_NODE": "auto"},
        dict(launcher="kubeflow", rank=1, world_size=2, local_world_size=1),
    ),
    "TrainJob pod with torchrun: torchrun": (
        TRAINJOB_GAUDI_TORCHRUN,
        dict(launcher="torchrun", rank=9, world_size=64, local_world_size=32, node_rank=0),
    ),
}


@pytest.mark.parametrize("env, expected", CASES.values(), ids=list(CASES))
def test_each_engines_variables_give_the_right_cluster(
    env: Mapping[str, str], expected: dict[str, Any]
) -> None:
    check_case(env, expected)


def test_skypilot_names_each_fields_variable() -> None:
    info = cluster(SKYPILOT_NODE_1)
    assert info.sources["master_addr"] == "SKYPILOT_NODE_IPS (first line)"
    assert info.sources["run_id"] == "SKYPILOT_TASK_ID"
    assert info.run_id == "skypilot/" + SKYPILOT_NODE_1["SKYPILOT_TASK_ID"]


def test_a_setup_command_is_no_rank_of_the_task() -> None:
    # setup gets SKYPILOT_SETUP_NODE_RANK, not SKYPILOT_NODE_RANK.
    env = {k: v for k, v in SKYPILOT_NODE_1.items() if k != "SKYPILOT_NODE_RANK"}
    assert cluster({**env, "SKYPILOT_SETUP_NODE_RANK": "1"}).launcher == "single"


def test_skypilot_node_ips_that_do_not_match_the_node_count_are_refused() -> None:
    with pytest.raises(ConfigError, match="lists 1 addresses but SKYPILOT_NUM_NODES=2"):
        cluster({**SKYPILOT_NODE_1, "SKYPILOT_NODE_IPS": "10.128.0.7"})


def test_skypilot_without_its_node_count_names_the_variable() -> None:
    env = {k: v for k, v in SKYPILOT_NODE_1.items() if k != "SKYPILOT_NUM_NODES"}
    with pytest.raises(ConfigError, match="missing SKYPILOT_NUM_NODES"):
        cluster(env)


def test_a_ray_task_without_ray_trains_variables_is_not_a_ray_train_worker() -> None:
    env = {k: v for k, v in RAY_TRAIN_WORKER.items() if k.startswith("RAY_")}
    assert cluster(env).launcher == "single"


def test_a_ray_train_worker_missing_a_variable_names_it() -> None:
    env = {k: v for k, v in RAY_TRAIN_WORKER.items() if k != "NODE_RANK"}
    with pytest.raises(ConfigError, match="NODE_RANK"):
        cluster(env)


def test_plain_env_vars_without_rays_markers_stay_env() -> None:
    env = {k: v for k, v in RAY_TRAIN_WORKER.items() if not k.startswith("RAY_")}
    assert cluster({**env, "MASTER_ADDR": "127.0.0.1"}).launcher == "env"


def test_trainjob_nproc_from_the_cpu_count_without_torchrun_explains_kubeflows_rule() -> None:
    with pytest.raises(ConfigError, match="pod's CPU count unless a resource name contains"):
        cluster({**TRAINJOB_NODE, "PET_NPROC_PER_NODE": "32"})
