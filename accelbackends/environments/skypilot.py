"""``skypilot``: a node of a SkyPilot task whose ``run`` command starts the training itself.

SkyPilot runs a task's ``run`` command once on every node it reserved and gives it
``SKYPILOT_NODE_RANK`` (0 to nodes - 1), ``SKYPILOT_NUM_NODES``, ``SKYPILOT_NODE_IPS`` (one
address per line, in node-rank order), ``SKYPILOT_NUM_GPUS_PER_NODE`` and ``SKYPILOT_TASK_ID``
(the same on every node of the task, and kept across a managed job's recoveries). A ``run`` that
is ``python train.py`` is one process per node: rank = node rank, world size = node count,
rank 0's address = the first line of ``SKYPILOT_NODE_IPS``, the port derived from the task id.

A launcher inside the ``run`` command says otherwise and wins: ``torchrun`` is asked before this
environment (its workers stay ``torchrun``), and a ``WORLD_SIZE`` that differs from the node count
leaves the process to the launcher that set it. The ``setup`` command gets
``SKYPILOT_SETUP_NODE_RANK`` instead of ``SKYPILOT_NODE_RANK``, so a script run during set-up is
not taken for a rank of the task.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plugin import ClusterInfo, ConfigError, hookimpl
from ._common import Reader, read_int, require, shown

__all__ = ["accelbackends_cluster_environment", "node_ips"]


def node_ips(env: Mapping[str, str]) -> list[str]:
    """The addresses in ``SKYPILOT_NODE_IPS``, one per node in node-rank order."""
    return [line.strip() for line in env.get("SKYPILOT_NODE_IPS", "").splitlines() if line.strip()]


@hookimpl
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo | None:
    if not env.get("SKYPILOT_NODE_RANK", "").strip():
        return None
    require(env, "SkyPilot", "SKYPILOT_NODE_RANK", "SKYPILOT_NUM_NODES")
    r = Reader(env, "skypilot")
    nodes = read_int(env, "SKYPILOT_NUM_NODES")
    if env.get("WORLD_SIZE", "").strip() and read_int(env, "WORLD_SIZE", low=1) != nodes:
        return None  # a launcher inside the run command started its own ranks
    node = r.read("node_rank", "SKYPILOT_NODE_RANK")
    world = r.read("world_size", "SKYPILOT_NUM_NODES")
    rank = r.derive("rank", node, "SKYPILOT_NODE_RANK (one process per node)")
    local = r.derive("local_rank", 0, "one process per node")
    local_world = r.derive("local_world_size", 1, "one process per node")
    r.check_counts(rank, world, local, local_world, node)
    ips = node_ips(env)
    if ips and len(ips) != nodes:
        raise ConfigError(
            f"SKYPILOT_NODE_IPS={shown(env['SKYPILOT_NODE_IPS'])} lists {len(ips)} addresses but "
            f"SKYPILOT_NUM_NODES={nodes}; SkyPilot writes one line per node (were they set by "
            "hand?)"
        )
    task = env.get("SKYPILOT_TASK_ID", "").strip()
    if task:
        r.sources["run_id"] = "SKYPILOT_TASK_ID"
    addr, port = r.rendezvous(
        world,
        local_world,
        derive_addr=lambda: (ips[0], "SKYPILOT_NODE_IPS (first line)") if ips else None,
        job_id=(task, "SKYPILOT_TASK_ID") if task else None,
        hint=" (SkyPilot sets SKYPILOT_NODE_IPS for the run command)",
    )
    return r.cluster(
        rank=rank,
        world_size=world,
        local_rank=local,
        local_world_size=local_world,
        node_rank=node,
        master_addr=addr,
        master_port=port,
        run_id=f"skypilot/{task}" if task else "",
    )
