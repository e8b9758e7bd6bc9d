"""``env``: the plain ``env://`` variables, set by hand or by a job system (e.g. Kubeflow).

``RANK`` and ``WORLD_SIZE`` are required together; ``MASTER_ADDR`` and ``MASTER_PORT`` too when
more than one rank runs. ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` are optional: without them each
rank is taken to be alone on its node; with ``LOCAL_RANK`` alone, the node is taken to hold up to
``WORLD_SIZE`` ranks.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plugin import ClusterInfo, hookimpl
from ._common import read_int, read_port, require


@hookimpl
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo | None:
    if "RANK" not in env and "WORLD_SIZE" not in env:
        return None
    require(env, "env://", "RANK", "WORLD_SIZE")
    rank, world_size = read_int(env, "RANK"), read_int(env, "WORLD_SIZE")
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
        local_world_size = read_int(env, "LOCAL_WORLD_SIZE")
        sources["local_world_size"] = "LOCAL_WORLD_SIZE"
    node_var = next((v for v in ("NODE_RANK", "GROUP_RANK") if v in env), None)
    if node_var:
        node_rank, sources["node_rank"] = read_int(env, node_var), node_var
    else:
        node_rank = rank // max(1, local_world_size)
        sources["node_rank"] = "RANK // local world size"
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
