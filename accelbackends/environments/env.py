"""``env``: the plain ``env://`` variables, set by hand or by a job system (e.g. Kubeflow).

``RANK`` and ``WORLD_SIZE`` are required together; ``MASTER_ADDR`` and ``MASTER_PORT`` too when
more than one rank runs. ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` are optional: without them each
rank is taken to be alone on its node; with ``LOCAL_RANK`` alone, every rank is taken to be on
this one node, which holds only where ``LOCAL_RANK`` equals ``RANK`` and no ``NODE_RANK`` above 0
says otherwise. A shape that says the ranks span nodes without saying how many are on this one
(``RANK=8 LOCAL_RANK=0``, ``NODE_RANK=1``, and no ``LOCAL_WORLD_SIZE``: DeepSpeed's launcher's
variables read as plain ``env://``) is refused: the node's rank count, which device binding and CPU
affinity follow, would be a guess.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plugin import ClusterInfo, ConfigError, hookimpl
from ._common import read_int, read_port, require


@hookimpl
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo | None:
    if "RANK" not in env and "WORLD_SIZE" not in env:
        return None
    require(env, "env://", "RANK", "WORLD_SIZE")
    rank, world_size = read_int(env, "RANK"), read_int(env, "WORLD_SIZE", low=1)
    sources = {"rank": "RANK", "world_size": "WORLD_SIZE"}
    if world_size > 1:
        require(env, "env://", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    master_addr = env.get("MASTER_ADDR") or None
    master_port = read_port(env, "MASTER_PORT") if env.get("MASTER_PORT") else None
    sources.update(master_addr="MASTER_ADDR", master_port="MASTER_PORT")

    local_rank, local_world_size = 0, 1
    sources.update(
        local_rank="default 0 (no LOCAL_RANK)", local_world_size="default 1 (no LOCAL_WORLD_SIZE)"
    )
    if "LOCAL_RANK" in env:
        local_rank, sources["local_rank"] = read_int(env, "LOCAL_RANK"), "LOCAL_RANK"
        local_world_size, sources["local_world_size"] = (
            world_size,
            "WORLD_SIZE (no LOCAL_WORLD_SIZE)",
        )
    if "LOCAL_WORLD_SIZE" in env:
        local_world_size = read_int(env, "LOCAL_WORLD_SIZE", low=1)
        sources["local_world_size"] = "LOCAL_WORLD_SIZE"
    node_var = next((v for v in ("NODE_RANK", "GROUP_RANK") if v in env), None)
    if node_var:
        node_rank, sources["node_rank"] = read_int(env, node_var), node_var
        # Without LOCAL_RANK each rank is alone on its node, so the node's index is the rank.
        alone = "LOCAL_RANK" not in env and node_rank == rank
        if "LOCAL_WORLD_SIZE" not in env and node_rank > 0 and not alone:
            raise ConfigError(
                f"{node_var}={node_rank} says this is not the first node, but LOCAL_WORLD_SIZE "
                "is not set, so how many ranks run on this node cannot be known (device binding "
                "and CPU affinity follow it); set LOCAL_WORLD_SIZE to the number of ranks on "
                "this node"
            )
    else:
        node_rank = rank // max(1, local_world_size)
        sources["node_rank"] = "RANK // local world size"
    if "LOCAL_RANK" in env and "LOCAL_WORLD_SIZE" not in env and local_rank != rank:
        raise ConfigError(
            f"RANK={rank} with LOCAL_RANK={local_rank} means the ranks span more than one node, "
            "but LOCAL_WORLD_SIZE is not set, so how many ranks run on this node cannot be "
            "known (device binding and CPU affinity follow it); set LOCAL_WORLD_SIZE to the "
            "number of ranks on this node (a launcher that sets LOCAL_SIZE and CROSS_RANK is "
            "DeepSpeed's, which accelbackends reads as such)"
        )
    return ClusterInfo(
        launcher="env",
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        local_world_size=local_world_size,
        node_rank=node_rank,
        master_addr=master_addr,
        master_port=master_port,
        sources=sources,
    )
