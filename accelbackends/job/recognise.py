"""Which job this process belongs to, as `accelbackends.init` and
`accelbackends.attach` recognise it: accelbackends' launcher plugins, and the processes
Lightning starts itself, which no launcher plugin claims (they carry no `RANK`)."""

from __future__ import annotations

from collections.abc import Mapping

from ..environments._common import read_int, read_port
from ..plugin.errors import ConfigError, InitError
from ..plugin.types import ClusterInfo
from ..registry.facade import Registry

__all__ = ["cluster_for_init", "lightning_child_cluster", "recognise"]


def lightning_child_cluster(env: Mapping[str, str]) -> ClusterInfo | None:
    """The job as Lightning describes it to the processes it starts itself (`python train.py`
    with `devices=N`): `LOCAL_RANK`, `WORLD_SIZE`, `NODE_RANK` and `MASTER_ADDR/PORT`,
    but no `RANK` and no `LOCAL_WORLD_SIZE`. None when `env` does not have that shape.

    The global rank is Lightning's own rule, `NODE_RANK * ranks per node + LOCAL_RANK`, with
    every node holding `WORLD_SIZE / nodes` ranks; the node count is not in the environment,
    so a multi-node job needs `LOCAL_WORLD_SIZE` (or `num_nodes` through
    `accelbackends.integrations.lightning.AccelBackendsEnvironment`).
    """
    if "RANK" in env or "LOCAL_RANK" not in env or "WORLD_SIZE" not in env:
        return None
    world_size = read_int(env, "WORLD_SIZE")
    local_rank = read_int(env, "LOCAL_RANK")
    node_rank = read_int(env, "NODE_RANK") if "NODE_RANK" in env else 0
    sources = {
        "world_size": "WORLD_SIZE",
        "local_rank": "LOCAL_RANK",
        "node_rank": "NODE_RANK" if "NODE_RANK" in env else "default 0 (no NODE_RANK)",
    }
    if "LOCAL_WORLD_SIZE" in env:
        per_node, sources["local_world_size"] = (
            read_int(env, "LOCAL_WORLD_SIZE"),
            "LOCAL_WORLD_SIZE",
        )
    elif node_rank == 0:
        # Node 0 of an unknown number of nodes: the rank is right whatever the node count.
        per_node, sources["local_world_size"] = world_size, "WORLD_SIZE (no LOCAL_WORLD_SIZE)"
    else:
        raise ConfigError(
            f"this process looks like one Lightning started (LOCAL_RANK={local_rank}, "
            f"WORLD_SIZE={world_size}, NODE_RANK={node_rank}, no RANK), but its global rank "
            "cannot be known without the number of ranks per node; set LOCAL_WORLD_SIZE, or use "
            "accelbackends.integrations.lightning.AccelBackendsEnvironment, to which Lightning "
            "hands the ranks itself"
        )
    sources["rank"] = "NODE_RANK * local world size + LOCAL_RANK"
    master_port = read_port(env, "MASTER_PORT") if env.get("MASTER_PORT") else None
    return ClusterInfo(
        launcher="lightning",
        rank=node_rank * per_node + local_rank,
        world_size=world_size,
        local_rank=local_rank,
        local_world_size=per_node,
        node_rank=node_rank,
        master_addr=env.get("MASTER_ADDR") or None,
        master_port=master_port,
        sources={**sources, "master_addr": "MASTER_ADDR", "master_port": "MASTER_PORT"},
    )


def recognise(registry: Registry) -> ClusterInfo:
    """The launcher's view of this process: accelbackends' recognition, or Lightning's child
    processes, which no launcher plugin claims."""
    try:
        return registry.cluster_environment()
    except ConfigError:
        child = lightning_child_cluster(registry.env)
        if child is None:
            raise
        return child


def cluster_for_init(registry: Registry) -> ClusterInfo:
    """The launcher's view for `accelbackends.init`, which refuses Lightning's children.

    Lightning starts its processes by running the script again; one that reaches `init()`
    means the parent passed the same call before Lightning started it, made a one-rank group,
    and Lightning reuses that group: the parent would train alone.
    """
    cluster = recognise(registry)
    if cluster.launcher == "lightning":
        raise InitError(
            f"accelbackends.init() runs in a process Lightning started (LOCAL_RANK="
            f"{cluster.local_rank}, WORLD_SIZE={cluster.world_size}, no RANK): its parent "
            "called init() before Lightning started the other ranks, so the parent holds a "
            "one-rank process group that Lightning reuses, and would train alone. Pass "
            "plugins=[accelbackends.integrations.lightning.AccelBackendsEnvironment()] and call "
            "accelbackends.attach() after fabric.launch() / in the LightningModule instead, or "
            "start the ranks with a launcher (torchrun, mpirun, srun)"
        )
    return cluster
