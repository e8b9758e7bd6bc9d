"""torchrun (TorchElastic) workers, plain env:// variables, and no launcher at all."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from .varsets import (
    TORCHRUN_WORKER,
    CaseTable,
    check_case,
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
