"""``torchrun`` (TorchElastic): recognised by ``TORCHELASTIC_RUN_ID``, which its agent always sets.

With ``TORCHELASTIC_USE_AGENT_STORE=True`` the agent already hosts the rendezvous store on
``MASTER_PORT``: every rank connects to it as a client; hosting a second one there would fail.

torchrun numbers its workers node by node: worker *i* of the agent with ``GROUP_RANK`` *g* has
``RANK`` = (the ranks of the agents before it) + *i*. With ``--virtual-local-rank`` (torch 2.15,
pytorch/pytorch#166680) every worker gets ``LOCAL_RANK=0`` and its own one-GPU
``CUDA_VISIBLE_DEVICES``; its real index on the node, which CPU affinity and ``info`` need, is
then ``RANK - GROUP_RANK * LOCAL_WORLD_SIZE`` where every agent runs the same number of workers
(``WORLD_SIZE = GROUP_WORLD_SIZE * LOCAL_WORLD_SIZE``). Where they do not, the index cannot be
known from one worker's variables, and the shape is refused rather than guessed.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plugin import ClusterInfo, ConfigError, hookimpl
from ._common import Reader, read_int, read_port, require

_FIELDS = {
    "rank": "RANK",
    "world_size": "WORLD_SIZE",
    "local_rank": "LOCAL_RANK",
    "local_world_size": "LOCAL_WORLD_SIZE",
    "node_rank": "GROUP_RANK",
}


def _one_visible_device(env: Mapping[str, str]) -> bool:
    value = env.get("CUDA_VISIBLE_DEVICES")
    return value is not None and len([i for i in value.split(",") if i.strip()]) == 1


def _node_local_rank(r: Reader, values: dict[str, int]) -> tuple[int, bool]:
    """(this worker's index on its node, whether torchrun gave it a virtual ``LOCAL_RANK``)."""
    rank, local, per_node, group = (
        values["rank"],
        values["local_rank"],
        values["local_world_size"],
        values["node_rank"],
    )
    agents = read_int(r.env, "GROUP_WORLD_SIZE") if r.first("GROUP_WORLD_SIZE") else None
    even = agents is not None and values["world_size"] == agents * per_node
    if not even:
        if local == 0 and per_node > 1 and _one_visible_device(r.env):
            raise ConfigError(
                f"torchrun gave this worker LOCAL_RANK=0 and one GPU "
                f"(CUDA_VISIBLE_DEVICES={r.env['CUDA_VISIBLE_DEVICES'].strip()}) of "
                f"LOCAL_WORLD_SIZE={per_node}: that is --virtual-local-rank, which hides the "
                "worker's index on its node, and with "
                + (
                    f"WORLD_SIZE={values['world_size']} != GROUP_WORLD_SIZE={agents} * "
                    f"LOCAL_WORLD_SIZE={per_node} the nodes run different numbers of workers, "
                    if agents is not None
                    else "no GROUP_WORLD_SIZE "
                )
                + "so it cannot be derived; start the same --nproc-per-node on every node, or "
                "leave out --virtual-local-rank"
            )
        return local, False
    derived = rank - group * per_node
    if derived == local:
        return local, False
    if local == 0 and 0 < derived < per_node and _one_visible_device(r.env):
        r.derive(
            "local_rank",
            derived,
            "RANK - GROUP_RANK * LOCAL_WORLD_SIZE (torchrun --virtual-local-rank: LOCAL_RANK=0 "
            "in every worker)",
        )
        return derived, True
    raise ConfigError(
        f"LOCAL_RANK={local} does not match RANK={rank} - GROUP_RANK={group} * "
        f"LOCAL_WORLD_SIZE={per_node} = {derived}: torchrun numbers its workers node by node, "
        "so the variables contradict each other (were some set by hand?)"
    )


@hookimpl
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo | None:
    if "TORCHELASTIC_RUN_ID" not in env:
        return None
    require(env, "torchrun", *_FIELDS.values(), "MASTER_ADDR", "MASTER_PORT")
    r = Reader(env, "torchrun")
    values = {field: r.read(field, var) for field, var in _FIELDS.items()}
    r.check_counts(
        values["rank"],
        values["world_size"],
        values["local_rank"],
        values["local_world_size"],
        values["node_rank"],
    )
    local, virtual = _node_local_rank(r, values)
    r.sources.update(master_addr="MASTER_ADDR", master_port="MASTER_PORT")
    restart = env.get("TORCHELASTIC_RESTART_COUNT", "0").strip() or "0"
    return r.cluster(
        rank=values["rank"],
        world_size=values["world_size"],
        local_rank=local,
        local_world_size=values["local_world_size"],
        node_rank=values["node_rank"],
        master_addr=env["MASTER_ADDR"].strip(),
        master_port=read_port(env, "MASTER_PORT"),
        store_hosted=env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
        # Keys of a restarted worker group must not meet the previous attempt's keys in the
        # agent's long-lived store.
        run_id=f"{env['TORCHELASTIC_RUN_ID']}/{restart}",
        virtual_local_rank=virtual,
    )
