"""``kubeflow``: a pod of a Kubeflow ``PyTorchJob`` (training-operator) or ``TrainJob`` (Trainer).

The operator gives every pod ``PET_NNODES``, ``PET_NODE_RANK``, ``PET_NPROC_PER_NODE``,
``PET_MASTER_ADDR`` and ``PET_MASTER_PORT`` (the ``PET_`` prefix makes them torchrun's defaults);
the ``PyTorchJob`` operator adds ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE`` and ``RANK``,
where ``RANK`` is the pod's index. A pod whose command is ``torchrun`` is recognised as
``torchrun`` (asked first). A pod that runs ``python train.py`` itself is one rank: that works
only with one process per pod, so ``PET_NPROC_PER_NODE`` above 1 without torchrun is an error
instead of ranks that silently disagree about the world size. ``PET_NPROC_PER_NODE=auto`` is what
the training-operator (1.7 and later) sets whenever the job's spec leaves ``nprocPerNode`` out;
without torchrun nothing starts more processes, so there it means this one process (and
`accelbackends.job.worldcheck` refuses it where the pod sees several devices of the selected
accelerator: one process would train on one of them).

Kubeflow Trainer v2 (``TrainJob`` with the torch-distributed runtime, its ``Torch`` plugin)
writes ``numProcPerNode`` into ``PET_NPROC_PER_NODE`` as an integer, ``auto``, ``cpu`` or
``gpu``, after resolving two of them against the TrainJob's ``resourcesPerNode``: ``auto``
becomes the pod's CPU count unless some resource name contains "gpu" (so a pod of Ascend NPUs or
Gaudi HPUs gets one process per CPU), and ``cpu`` becomes the CPU count. ``PET_NNODES`` is the
node count, ``PET_NODE_RANK`` the pod's completion index, ``PET_MASTER_ADDR``
``<job>-node-0-0.<job>`` and ``PET_MASTER_PORT`` 29500; there is no ``RANK``/``WORLD_SIZE``.
`accelbackends.job.worldcheck` compares the process count with the selected accelerator's devices.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plugin import ClusterInfo, ConfigError, hookimpl
from ._common import Reader, read_int

_MARKERS = ("PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE", "PET_MASTER_ADDR")


def _processes_per_pod(env: Mapping[str, str]) -> int:
    value = env.get("PET_NPROC_PER_NODE", "").strip()
    if not value or value == "auto":
        return 1
    if not value.isdigit():
        raise ConfigError(
            f"PET_NPROC_PER_NODE={value!r} is a torchrun setting, but this process was not "
            "started by torchrun; make the container's command `torchrun train.py` (it reads "
            "the PET_* variables) or set numProcPerNode to 1"
        )
    count = read_int(env, "PET_NPROC_PER_NODE")
    if count != 1:
        raise ConfigError(
            f"PET_NPROC_PER_NODE={count} asks for {count} processes per pod, but this process "
            "was not started by torchrun, so it would be the only one; make the container's "
            "command `torchrun train.py` (it reads the PET_* variables), or set numProcPerNode "
            "to 1. (Kubeflow Trainer turns numProcPerNode 'auto' into the pod's CPU count "
            'unless a resource name contains "gpu": an Ascend or Gaudi pod gets one process '
            "per CPU)"
        )
    return count


@hookimpl
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo | None:
    if not any(marker in env for marker in _MARKERS):
        return None
    r = Reader(env, "kubeflow")
    per_pod = _processes_per_pod(env)
    rank = r.read("rank", "RANK", "PET_NODE_RANK")
    if r.first("RANK") and r.first("PET_NODE_RANK") and rank != read_int(env, "PET_NODE_RANK"):
        raise ConfigError(
            f"RANK={rank} differs from PET_NODE_RANK={env['PET_NODE_RANK']}; with one process "
            "per pod both are the pod's index"
        )
    if ":" in env.get("PET_NNODES", ""):
        raise ConfigError(
            f"PET_NNODES={env['PET_NNODES']!r} is an elastic range, which only torchrun can "
            "follow; make the container's command `torchrun train.py`"
        )
    nodes = read_int(env, "PET_NNODES") if r.first("PET_NNODES") else None
    if r.first("WORLD_SIZE"):
        world = r.read("world_size", "WORLD_SIZE")
        if nodes is not None:
            r.check_product(world, nodes, "PET_NNODES", per_pod, "PET_NPROC_PER_NODE")
    else:
        world = r.read("world_size", "PET_NNODES")
    local_world = r.derive("local_world_size", 1, "one process per pod")
    local = r.derive("local_rank", 0, "one process per pod")
    node = r.derive("node_rank", rank, r.sources["rank"])
    r.check_counts(rank, world, local, local_world, node)
    pet_addr = r.first("PET_MASTER_ADDR")
    addr, port = r.rendezvous(
        world,
        local_world,
        derive_addr=lambda: (env[pet_addr].strip(), pet_addr) if pet_addr else None,
        port_var="PET_MASTER_PORT",
        hint=" (the operator sets it for PyTorchJob pods; is this pod part of one?)",
    )
    return r.cluster(
        rank=rank,
        world_size=world,
        local_rank=local,
        local_world_size=local_world,
        node_rank=node,
        master_addr=addr,
        master_port=port,
    )
