"""``torchrun`` (TorchElastic): recognised by ``TORCHELASTIC_RUN_ID``, which its agent always sets.

With ``TORCHELASTIC_USE_AGENT_STORE=True`` the agent already hosts the rendezvous store on
``MASTER_PORT``: every rank connects to it as a client; hosting a second one there would fail.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plugin import ClusterInfo, hookimpl
from ._common import Reader, read_port, require

_FIELDS = {
    "rank": "RANK",
    "world_size": "WORLD_SIZE",
    "local_rank": "LOCAL_RANK",
    "local_world_size": "LOCAL_WORLD_SIZE",
    "node_rank": "GROUP_RANK",
}


@hookimpl
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo | None:
    if "TORCHELASTIC_RUN_ID" not in env:
        return None
    require(env, "torchrun", *_FIELDS.values(), "MASTER_ADDR", "MASTER_PORT")
    r = Reader(env, "torchrun")
    values = {field: r.read(field, var) for field, var in _FIELDS.items()}
    r.sources.update(master_addr="MASTER_ADDR", master_port="MASTER_PORT")
    restart = env.get("TORCHELASTIC_RESTART_COUNT", "0").strip() or "0"
    return r.cluster(
        rank=values["rank"],
        world_size=values["world_size"],
        local_rank=values["local_rank"],
        local_world_size=values["local_world_size"],
        node_rank=values["node_rank"],
        master_addr=env["MASTER_ADDR"].strip(),
        master_port=read_port(env, "MASTER_PORT"),
        store_hosted=env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
        # Keys of a restarted worker group must not meet the previous attempt's keys in the
        # agent's long-lived store.
        run_id=f"{env['TORCHELASTIC_RUN_ID']}/{restart}",
    )
