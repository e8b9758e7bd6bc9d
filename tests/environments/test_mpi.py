"""MPI launchers: Open MPI's mpirun, MPICH/Intel MPI Hydra, HPE Cray PALS, PMIx launchers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from accelbackends import ConfigError
from accelbackends.environments._common import port_from_id

from .varsets import (
    DAEMON_STEP,
    CaseTable,
    HYDRA_2x4,
    JSRUN_2x4,
    MPIRUN_2x4,
    PALS_2x4,
    check_case,
    cluster,
    fields,
)

CASES: CaseTable = {
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
}


@pytest.mark.parametrize("env, expected", CASES.values(), ids=list(CASES))
def test_each_launchers_real_variables_give_the_right_cluster(
    env: Mapping[str, str], expected: dict[str, Any]
) -> None:
    check_case(env, expected)


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


def _hydra(rank: int, local_rank: int, local_size: int, size: int) -> dict[str, str]:
    return {
        "PMI_RANK": str(rank),
        "PMI_SIZE": str(size),
        "MPI_LOCALRANKID": str(local_rank),
        "MPI_LOCALNRANKS": str(local_size),
        "MASTER_ADDR": "node01",
    }


def test_round_robin_placement_is_refused_naming_the_variables_not_given_two_ranks_one_slot() -> (
    None
):
    # mpiexec -np 4 over two one-slot hosts: ranks 0, 2 on the first host, 1, 3 on the second.
    placement = {0: (0, 2), 1: (0, 2), 2: (1, 2), 3: (1, 2)}
    refused = []
    for rank, (local, local_size) in placement.items():
        try:
            cluster(_hydra(rank, local, local_size, 4))
        except ConfigError as exc:
            refused.append(rank)
            assert "PMI_RANK=" in str(exc) and "MPI_LOCALRANKID=" in str(exc)
            assert "not a packed placement" in str(exc)
    assert refused == [1, 2]


def test_packed_placement_gives_each_rank_its_own_node_and_local_rank() -> None:
    seen = {
        (info.node_rank, info.local_rank)
        for info in (cluster(_hydra(rank, rank % 2, 2, 4)) for rank in range(4))
    }
    assert seen == {(0, 0), (0, 1), (1, 0), (1, 1)}


def test_hydra_inside_a_slurm_allocation_takes_the_proxies_step_as_its_job() -> None:
    info = cluster({**DAEMON_STEP, **HYDRA_2x4, "MASTER_ADDR": "node01"})
    assert info.launcher == "mpich"
    assert info.run_id == "mpich/5000.0"
    assert info.master_port == port_from_id("5000.0")


def test_hydra_alone_across_nodes_has_no_job_identity_and_keeps_the_default_port() -> None:
    info = cluster({**HYDRA_2x4, "MASTER_ADDR": "node01"})
    assert (info.run_id, info.master_port) == ("", 29500)


MVAPICH_2x4 = {
    "MV2_COMM_WORLD_RANK": "5",
    "MV2_COMM_WORLD_SIZE": "8",
    "MV2_COMM_WORLD_LOCAL_RANK": "1",
    "MV2_COMM_WORLD_LOCAL_SIZE": "4",
    "MPIRUN_RSH_LAUNCH": "1",
}


def test_mvapich2_mpirun_rsh_ranks_are_recognised_from_mv2_comm_world() -> None:
    info = cluster({**MVAPICH_2x4, "MASTER_ADDR": "node01"})
    assert fields(info) == dict(
        launcher="mvapich",
        rank=5,
        world_size=8,
        local_rank=1,
        local_world_size=4,
        node_rank=1,
        master_addr="node01",
        master_port=29500,
    )
    with pytest.raises(ConfigError, match="mpirun_rsh"):
        cluster(MVAPICH_2x4)


@pytest.mark.parametrize(
    "extra, addr, port",
    [
        ({"AZ_BATCH_MASTER_NODE": "10.0.0.4:6105"}, "10.0.0.4", 6105),
        ({"AZ_BATCHAI_MPI_MASTER_NODE": "10.0.0.5"}, "10.0.0.5", None),
        ({"SM_HOSTS": '["algo-2", "algo-1"]'}, "algo-1", None),
    ],
    ids=["azureml-multinode", "azureml-mpi", "sagemaker"],
)
def test_managed_services_running_mpirun_say_where_rank_0_is(
    extra: dict[str, str], addr: str, port: int | None
) -> None:
    info = cluster({**MPIRUN_2x4, **extra})
    assert info.master_addr == addr
    assert info.master_port == (port or port_from_id("prterun-login1-81234@1"))


def test_a_sagemaker_host_list_that_is_not_json_is_an_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="SM_HOSTS="):
        cluster({**MPIRUN_2x4, "SM_HOSTS": "algo-1,algo-2"})
