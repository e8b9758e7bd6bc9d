"""Kubeflow PyTorchJob and TrainJob pods."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from .varsets import (
    PYTORCHJOB_WORKER,
    TRAINJOB_NODE,
    CaseTable,
    check_case,
    cluster,
    fields,
)

CASES: CaseTable = {
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
}


@pytest.mark.parametrize("env, expected", CASES.values(), ids=list(CASES))
def test_each_launchers_real_variables_give_the_right_cluster(
    env: Mapping[str, str], expected: dict[str, Any]
) -> None:
    check_case(env, expected)


def test_the_operators_default_nproc_auto_with_one_process_per_pod_is_that_one_process() -> None:
    # training-operator >= 1.7 writes PET_NPROC_PER_NODE=auto whenever nprocPerNode is left out.
    info = cluster({**PYTORCHJOB_WORKER, "PET_NPROC_PER_NODE": "auto"})
    assert fields(info) == dict(
        launcher="kubeflow",
        rank=2,
        world_size=4,
        local_rank=0,
        local_world_size=1,
        node_rank=2,
        master_addr="mnist-master-0",
        master_port=23456,
    )
