"""``deepspeed``: the workers DeepSpeed's own launcher starts (``deepspeed train.py``, and
``deepspeed --hostfile`` with its default pdsh runner, which starts the launcher on every node).

DeepSpeed's per-node launcher (``deepspeed/launcher/launch.py``, 0.19) sets ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, and, for the node,
``LOCAL_SIZE`` (its worker count), ``CROSS_RANK`` (its index) and ``CROSS_SIZE`` (the node count);
it sets no ``LOCAL_WORLD_SIZE`` and no ``NODE_RANK``, so read as plain ``env://`` the node would
seem to hold every rank of the job. ``CROSS_RANK`` is set by nothing else, and recognises it.
The launcher numbers ranks node by node and gives each worker ``RANK % LOCAL_SIZE`` as its local
rank; nodes may run different numbers of workers (``--include`` picks GPUs per node).

DeepSpeed's MPI runners (``--launcher openmpi|mpich|impi|mvapich``) start the ranks with the MPI
launcher instead, whose own variables (asked first) describe them; its ``--launcher slurm``
starts them with ``srun``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plugin import ClusterInfo, ConfigError, hookimpl
from ._common import Reader, read_int, require

__all__ = ["accelbackends_cluster_environment"]

_FIELDS = {
    "rank": "RANK",
    "world_size": "WORLD_SIZE",
    "local_rank": "LOCAL_RANK",
    "local_world_size": "LOCAL_SIZE",
    "node_rank": "CROSS_RANK",
}


@hookimpl
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo | None:
    if "CROSS_RANK" not in env:
        return None
    require(env, "DeepSpeed", *_FIELDS.values(), "CROSS_SIZE", "MASTER_ADDR", "MASTER_PORT")
    r = Reader(env, "deepspeed")
    values = {field: r.read(field, var) for field, var in _FIELDS.items()}
    rank, world, local, per_node, node = (values[f] for f in _FIELDS)
    nodes = read_int(env, "CROSS_SIZE", low=1)
    r.check_counts(rank, world, local, per_node, node)
    if node >= nodes:
        raise ConfigError(f"CROSS_RANK={node} must be less than CROSS_SIZE={nodes}")
    if nodes > world:
        raise ConfigError(
            f"CROSS_SIZE={nodes} nodes cannot hold WORLD_SIZE={world} ranks (each node runs "
            "one at least); the launcher's variables contradict each other (were some set by "
            "hand?)"
        )
    if local != rank % per_node:
        raise ConfigError(
            f"LOCAL_RANK={local} is not RANK={rank} % LOCAL_SIZE={per_node} = {rank % per_node}, "
            "which DeepSpeed's launcher gives every worker; the variables contradict each other "
            "(were some set by hand?)"
        )
    if world == nodes * per_node and rank // per_node != node:
        raise ConfigError(
            f"RANK={rank} is on node {rank // per_node} of CROSS_SIZE={nodes} nodes of "
            f"LOCAL_SIZE={per_node} ranks each, but CROSS_RANK={node}; DeepSpeed's launcher "
            "numbers ranks node by node (were some variables set by hand?)"
        )
    addr, port = r.rendezvous(
        world, per_node, hint=" (DeepSpeed's launcher sets it from --master_addr)"
    )
    return r.cluster(
        rank=rank,
        world_size=world,
        local_rank=local,
        local_world_size=per_node,
        node_rank=node,
        master_addr=addr,
        master_port=port,
    )
