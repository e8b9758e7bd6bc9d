"""DeepSpeed's own launcher: LOCAL_SIZE/CROSS_RANK/CROSS_SIZE instead of LOCAL_WORLD_SIZE and
NODE_RANK, read as DeepSpeed sets them; the same variables as plain env:// are refused, not
misread as one node of every rank."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from accelbackends import ConfigError

from .varsets import CaseTable, DEEPSPEED_2x8, SRUN_2x4, check_case, cluster

CASES: CaseTable = {
    "node 1 of two 8-GPU nodes": (
        DEEPSPEED_2x8,
        dict(
            launcher="deepspeed",
            rank=11,
            world_size=16,
            local_rank=3,
            local_world_size=8,
            node_rank=1,
            master_addr="node01",
            master_port=29500,
        ),
    ),
    "one node (deepspeed train.py)": (
        {
            **DEEPSPEED_2x8,
            "WORLD_SIZE": "8",
            "CROSS_RANK": "0",
            "CROSS_SIZE": "1",
            "RANK": "3",
            "MASTER_ADDR": "127.0.0.1",
        },
        dict(launcher="deepspeed", rank=3, local_rank=3, local_world_size=8, node_rank=0),
    ),
    # --include node01:0,1@node02:0,1,2: node 1 runs ranks 2-4, local rank = RANK % 3.
    "uneven nodes (--include)": (
        {**DEEPSPEED_2x8, "WORLD_SIZE": "5", "LOCAL_SIZE": "3", "RANK": "3", "LOCAL_RANK": "0"},
        dict(launcher="deepspeed", rank=3, local_rank=0, local_world_size=3, node_rank=1),
    ),
    # `srun --ntasks-per-node 1 deepspeed ...`: the workers inherit the step's variables.
    "started once per node by srun": (
        {**SRUN_2x4, **DEEPSPEED_2x8},
        dict(launcher="deepspeed", rank=11, node_rank=1, local_world_size=8),
    ),
}


@pytest.mark.parametrize("env, expected", CASES.values(), ids=list(CASES))
def test_deepspeed_launchers_variables_give_the_right_node_and_local_size(
    env: Mapping[str, str], expected: dict[str, Any]
) -> None:
    check_case(env, expected)


def test_info_sources_name_deepspeeds_variables() -> None:
    sources = cluster(DEEPSPEED_2x8).sources
    assert (sources["local_world_size"], sources["node_rank"]) == ("LOCAL_SIZE", "CROSS_RANK")


@pytest.mark.parametrize(
    "change, named",
    [
        ({"CROSS_RANK": "2"}, ("CROSS_RANK=2", "CROSS_SIZE=2")),
        ({"LOCAL_RANK": "2"}, ("LOCAL_RANK=2", "RANK=11 % LOCAL_SIZE=8")),
        ({"CROSS_RANK": "0"}, ("RANK=11", "CROSS_RANK=0")),
        ({"CROSS_SIZE": "17"}, ("CROSS_SIZE=17", "WORLD_SIZE=16")),
    ],
    ids=["node-beyond-node-count", "local-rank-not-rank-mod-size", "rank-on-other-node", "nodes"],
)
def test_contradicting_deepspeed_variables_are_refused_naming_both(
    change: dict[str, str], named: tuple[str, ...]
) -> None:
    with pytest.raises(ConfigError) as caught:
        cluster({**DEEPSPEED_2x8, **change})
    for text in named:
        assert text in str(caught.value)


def test_a_missing_local_size_names_what_deepspeeds_launcher_sets() -> None:
    env = {k: v for k, v in DEEPSPEED_2x8.items() if k != "LOCAL_SIZE"}
    with pytest.raises(ConfigError, match="missing LOCAL_SIZE; a DeepSpeed launch sets"):
        cluster(env)


def test_deepspeeds_variables_without_cross_rank_are_refused_as_env_not_read_as_one_node() -> None:
    # What accelbackends used to read as env://: local_world_size 16, node_rank 0.
    env = {k: v for k, v in DEEPSPEED_2x8.items() if k not in ("CROSS_RANK", "CROSS_SIZE")}
    with pytest.raises(ConfigError, match=r"RANK=11 with LOCAL_RANK=3 .* set LOCAL_WORLD_SIZE"):
        cluster(env)
