"""The single-host store that spawn() meets through: a FileStore in a private directory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch.distributed as dist

import accelbackends
from accelbackends import ClusterInfo, RendezvousError


def test_missing_rank_through_the_single_host_store_says_how_many_joined(tmp_path: Path) -> None:
    cluster = ClusterInfo(
        "spawn", rank=0, world_size=3, local_world_size=3, store_socket=str(tmp_path / "store")
    )
    with pytest.raises(
        RendezvousError, match=r"timed out after 0.5 s: 1/3 ranks joined at the local store"
    ):
        accelbackends.init(cluster=cluster, rendezvous_timeout=0.5)
    assert not dist.is_initialized()


def test_store_file_outlives_the_ranks_that_used_it(tmp_path: Path) -> None:
    # FileStore deletes its file once a set number of users are gone unless told -1; a rank
    # that leaves early must not take the store away from ranks still joining.
    path = tmp_path / "store"
    cluster = ClusterInfo("spawn", store_socket=str(path), run_id="first")
    accelbackends.init(cluster=cluster)
    accelbackends.destroy()
    assert path.exists()
    accelbackends.init(cluster=ClusterInfo("spawn", store_socket=str(path), run_id="second"))
    assert dist.get_world_size() == 1
    accelbackends.destroy()
