"""``lightning``: the processes Lightning starts itself (``python train.py`` with ``devices=N``).

Lightning describes the job to them with ``LOCAL_RANK``, ``WORLD_SIZE``, ``NODE_RANK`` and
``MASTER_ADDR``/``MASTER_PORT``, but no ``RANK`` and no ``LOCAL_WORLD_SIZE``; no other launcher
claims that shape (``env`` needs ``RANK``), so this environment is asked just before ``env``.

The global rank is Lightning's own rule, ``NODE_RANK * ranks per node + LOCAL_RANK``, with every
node holding ``WORLD_SIZE / nodes`` ranks; the node count is not in the environment, so a
multi-node job needs ``LOCAL_WORLD_SIZE`` (or ``num_nodes`` through
``accelbackends.integrations.lightning.AccelBackendsEnvironment``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plugin import ClusterInfo, ConfigError, hookimpl
from ._common import read_int, read_port

__all__ = ["accelbackends_cluster_environment", "lightning_rank"]


@hookimpl
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo | None:
    return lightning_rank(env)


def lightning_rank(env: Mapping[str, str]) -> ClusterInfo | None:
    """The place ``env`` gives a process Lightning started, or None where it is not that shape.

    A plain function (the hook above answers with it) so that the core may ask it of a child's
    environment (`accelbackends.job.children`) without calling a hook implementation."""
    if "RANK" in env or "LOCAL_RANK" not in env or "WORLD_SIZE" not in env:
        return None
    world_size = read_int(env, "WORLD_SIZE", low=1)
    local_rank = read_int(env, "LOCAL_RANK")
    node_rank = read_int(env, "NODE_RANK") if "NODE_RANK" in env else 0
    sources = {
        "world_size": "WORLD_SIZE",
        "local_rank": "LOCAL_RANK",
        "node_rank": "NODE_RANK" if "NODE_RANK" in env else "default 0 (no NODE_RANK)",
    }
    if "LOCAL_WORLD_SIZE" in env:
        per_node, sources["local_world_size"] = (
            read_int(env, "LOCAL_WORLD_SIZE", low=1),
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
