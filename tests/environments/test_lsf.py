"""LSF's jsrun: rank file, placement and the derived port."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelbackends import ConfigError
from accelbackends.environments._common import port_from_id
from accelbackends.environments.lsf import node_index

from .varsets import (
    JSRUN_2x4,
    cluster,
    fields,
)


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


def test_the_node_rank_comes_from_this_hosts_place_in_the_rank_file(tmp_path: Path) -> None:
    rankfile = tmp_path / "rankfile"
    rankfile.write_text("batch3\n" + "a01n01\n" * 4 + "a01n02\n" * 4)
    env = {**JSRUN_2x4, "LSB_DJOB_RANKFILE": str(rankfile)}
    # Rank 5 of a round-robin placement can be on the first host: the file says so.
    assert node_index(env, "a01n01") == (0, "LSB_DJOB_RANKFILE (this host's place, a01n01)")
    assert node_index(env, "a01n02.cluster.example") == (
        1,
        "LSB_DJOB_RANKFILE (this host's place, a01n02)",
    )
    assert node_index(env, "elsewhere") is None
    rankfile.write_text("batch3.example\na01n01.example\na01n02.example\n")
    assert node_index(env, "a01n02") == (1, "LSB_DJOB_RANKFILE (this host's place, a01n02.example)")
