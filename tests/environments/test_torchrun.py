"""torchrun (TorchElastic) workers, plain env:// variables, and no launcher at all."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from accelbackends import ConfigError
from accelbackends.job import environ, worldcheck

from .varsets import (
    TORCHRUN_VIRTUAL_WORKER,
    TORCHRUN_WORKER,
    CaseTable,
    check_case,
    cluster,
)

CASES: CaseTable = {
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
def test_each_launchers_real_variables_give_the_right_cluster(
    env: Mapping[str, str], expected: dict[str, Any]
) -> None:
    check_case(env, expected)


# -- the rank on the node where the launcher does not give it straight ----------------------------


def _virtual_worker(index: int) -> dict[str, str]:
    """Worker ``index`` of node 1 under `torchrun --nnodes 2 --nproc-per-node 8
    --virtual-local-rank`: LOCAL_RANK=0 and its own GPU."""
    rank = 8 + index
    return {
        **TORCHRUN_VIRTUAL_WORKER,
        "RANK": str(rank),
        "ROLE_RANK": str(rank),
        "CUDA_VISIBLE_DEVICES": str(index),
    }


def test_virtual_local_rank_workers_get_their_real_index_on_the_node() -> None:
    found = [cluster(_virtual_worker(i)) for i in range(8)]
    assert [c.local_rank for c in found] == list(range(8))
    assert all(c.node_rank == 1 for c in found)
    assert all(c.virtual_local_rank for c in found[1:])  # worker 0 reads the same either way
    assert "--virtual-local-rank" in found[3].sources["local_rank"]


def test_virtual_local_rank_keeps_local_rank_0_for_the_frameworks_and_the_world_check() -> None:
    env = _virtual_worker(3)
    found = cluster(env)
    assert found.local_rank_variable == 0
    assert worldcheck.check(found, env).problem is None
    context = type(
        "Context",
        (),
        {"cluster": found, "rank": 11, "world_size": 16, "local_rank": 3, "local_world_size": 8},
    )()
    assert environ.job_variables(context)["LOCAL_RANK"] == "0"


def test_worker_0_and_plain_torchrun_are_not_virtual() -> None:
    assert not cluster(_virtual_worker(0)).virtual_local_rank
    assert not cluster(TORCHRUN_WORKER).virtual_local_rank


def test_virtual_local_rank_on_uneven_nodes_is_refused_not_guessed() -> None:
    env = {**_virtual_worker(3), "WORLD_SIZE": "12"}  # node 0 ran 4 workers, this one 8
    with pytest.raises(ConfigError, match=r"--virtual-local-rank.*cannot be derived"):
        cluster(env)


def test_a_local_rank_that_contradicts_torchruns_numbering_is_refused() -> None:
    env = {**TORCHRUN_WORKER, "LOCAL_RANK": "2"}  # RANK 5 = GROUP_RANK 1 * 4 + 1
    with pytest.raises(ConfigError, match="LOCAL_RANK=2 does not match RANK=5"):
        cluster(env)


_MASTER = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}


@pytest.mark.parametrize(
    "env, match",
    [
        (
            {"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "NODE_RANK": "1", **_MASTER},
            "NODE_RANK=1 says this is not the first node, but LOCAL_WORLD_SIZE is not set",
        ),
        (
            {"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", **_MASTER},
            "RANK=9 with LOCAL_RANK=1 means the ranks span more than one node",
        ),
        (
            {"RANK": "3", "WORLD_SIZE": "4", "NODE_RANK": "1", **_MASTER},
            "NODE_RANK=1 says this is not the first node",
        ),
    ],
    ids=["node-rank-1-with-local-rank", "local-rank-not-rank", "node-rank-not-rank-alone"],
)
def test_env_without_local_world_size_across_nodes_is_refused_not_guessed(
    env: Mapping[str, str], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        cluster(env)


@pytest.mark.parametrize(
    "env, expected",
    [
        (
            {"RANK": "3", "WORLD_SIZE": "4", "NODE_RANK": "3", **_MASTER},
            dict(local_rank=0, local_world_size=1, node_rank=3),
        ),
        (
            {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "NODE_RANK": "0", **_MASTER},
            dict(local_rank=2, local_world_size=4, node_rank=0),
        ),
        (
            {
                "RANK": "9",
                "WORLD_SIZE": "16",
                "LOCAL_RANK": "1",
                "LOCAL_WORLD_SIZE": "8",
                "NODE_RANK": "1",
                **_MASTER,
            },
            dict(local_rank=1, local_world_size=8, node_rank=1),
        ),
    ],
    ids=["one-rank-per-node", "one-node", "local-world-size-given"],
)
def test_env_shapes_that_fix_the_node_are_still_read(
    env: Mapping[str, str], expected: dict[str, Any]
) -> None:
    check_case(env, {"launcher": "env", **expected})
