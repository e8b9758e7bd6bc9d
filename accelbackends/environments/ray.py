"""``ray``: a Ray Train worker.

Every process Ray starts carries Ray's own ``RAY_RAYLET_PID`` and ``RAY_JOB_ID``; Ray Train's
torch backend adds ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` and
``NODE_RANK`` for each worker, from its placement of the workers on Ray's nodes. Both together
make a Ray Train worker. This environment is asked before the MPI launchers and Slurm: a Ray
cluster started with ``srun ray start`` or under SkyPilot hands those launchers' variables down to
every worker, but they describe Ray's daemons, not the training job.

Ray's own ``TorchConfig`` sets ``MASTER_ADDR`` to rank 0's node address even when every worker is
on one node; `accelbackends.integrations.ray.TorchConfig` sets it only when the workers span
nodes, so that a one-node job meets on loopback, and sets ``MASTER_PORT`` to a port that rank 0's
node found free.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plugin import ClusterInfo, hookimpl
from ._common import Reader, require

__all__ = ["accelbackends_cluster_environment", "is_ray_worker"]

#: Set by Ray in every worker process it starts.
_MARKERS = ("RAY_RAYLET_PID", "RAY_JOB_ID")
_FIELDS = {
    "rank": "RANK",
    "world_size": "WORLD_SIZE",
    "local_rank": "LOCAL_RANK",
    "local_world_size": "LOCAL_WORLD_SIZE",
    "node_rank": "NODE_RANK",
}
#: What Ray Train's torch backend sets in each worker.
_TRAIN_VARIABLES = tuple(_FIELDS.values())


def is_ray_worker(env: Mapping[str, str]) -> bool:
    """True in a process Ray started (a task or actor, Ray Train's workers among them)."""
    return any(env.get(marker, "").strip() for marker in _MARKERS)


@hookimpl
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo | None:
    if not is_ray_worker(env) or ("RANK" not in env and "WORLD_SIZE" not in env):
        return None
    require(env, "Ray Train", *_TRAIN_VARIABLES)
    r = Reader(env, "ray")
    values = {field: r.read(field, var) for field, var in _FIELDS.items()}
    r.check_counts(
        values["rank"],
        values["world_size"],
        values["local_rank"],
        values["local_world_size"],
        values["node_rank"],
    )
    job = env.get("RAY_JOB_ID", "").strip()
    if job:
        r.sources["run_id"] = "RAY_JOB_ID"
    addr, port = r.rendezvous(
        values["world_size"],
        values["local_world_size"],
        job_id=(job, "RAY_JOB_ID") if job else None,
        hint=" (accelbackends.integrations.ray.TorchConfig sets it for workers on several nodes)",
    )
    return r.cluster(
        rank=values["rank"],
        world_size=values["world_size"],
        local_rank=values["local_rank"],
        local_world_size=values["local_world_size"],
        node_rank=values["node_rank"],
        master_addr=addr,
        master_port=port,
        run_id=f"ray/{job}" if job else "",
    )
