"""`attach()`: a `accelbackends.Context` for a process group that someone else made.

A framework (Accelerate, DeepSpeed, Lightning, or a hand-written `init_process_group`) may
initialise `torch.distributed` before accelbackends gets a say. `init` refuses such a
group; `attach` describes it instead: rank and world size from the group itself, local rank
and node rank from the launcher accelbackends recognises, backend from torch, accelerator and
device from accelbackends' selection. Where the launcher's view and the group's differ, it fails
naming both, and so it does where a framework already set up in the process (`frameworks`)
sees another job than the group; where the group's backend or the framework's device differs
from what accelbackends would choose, it warns once, naming both.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from ..host import workers
from ..plugin import torchcompat
from ..plugin.errors import AccelBackendsWarning, InitError
from ..plugin.types import ClusterInfo, Context, Selection
from ..registry.facade import Registry, default_registry
from .frameworks import check_views
from .recognise import recognise
from .select import select

__all__ = ["attach", "pg_backends"]

_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, AccelBackendsWarning, stacklevel=3)


def pg_backends(process_group_backend: str) -> dict[str, str]:
    """`"cpu:gloo,cuda:nccl"` → `{"cpu": "gloo", "cuda": "nccl"}`; a plain `"gloo"` →
    `{"": "gloo"}` (one backend for every device type)."""
    backends: dict[str, str] = {}
    for part in process_group_backend.split(","):
        device, _, name = part.strip().rpartition(":")
        backends[device] = name
    return backends


def _cluster_for_group(registry: Registry, rank: int, world_size: int) -> ClusterInfo:
    cluster = recognise(registry)
    if cluster.launcher == "single" and world_size > 1:
        # No launcher: ranks started by hand (mp.spawn, a notebook). Assume one node.
        return ClusterInfo(
            launcher="unknown",
            rank=rank,
            world_size=world_size,
            local_rank=rank,
            local_world_size=world_size,
            node_rank=0,
            master_addr=registry.env.get("MASTER_ADDR") or None,
            sources={
                "rank": "torch.distributed.get_rank()",
                "world_size": "torch.distributed.get_world_size()",
                "local_rank": "the rank (no launcher recognised: one node assumed)",
                "local_world_size": "the world size (no launcher recognised: one node assumed)",
                "node_rank": "0 (no launcher recognised)",
            },
        )
    if (cluster.rank, cluster.world_size) != (rank, world_size):
        raise InitError(
            f"the process group says rank {rank} of {world_size}, but the {cluster.launcher} "
            f"launcher says rank {cluster.rank} of {cluster.world_size} "
            f"({cluster.source('rank')}={cluster.rank}, "
            f"{cluster.source('world_size')}={cluster.world_size}); the group was made for a "
            "different job than this process belongs to"
        )
    return cluster


def _framework_device(selection: Selection, local_rank: int) -> Any:
    """The device the framework made current, or the one accelbackends would bind."""
    import torch

    # None on a CUDA or XPU build of torch with no device present (torchcompat says how).
    current = torchcompat.current_accelerator_device(started_only=True)
    if current is not None:
        return current
    if selection.accelerator == "cpu":
        return torch.device("cpu")
    return torch.device(selection.accelerator, local_rank)


def _backend_used(device: Any, selection: Selection, group_backend: str) -> str:
    """The backend the group uses for ``device``'s tensors; warns once where ``device`` or that
    backend is not what accelbackends would select."""
    backends = pg_backends(group_backend)
    used = backends.get(device.type, backends.get("", group_backend))
    if device.type != selection.accelerator:
        _warn_once(
            f"the framework trains on {device} but accelbackends would select "
            f"{selection.accelerator!r} ({selection.reason})"
        )
    if used != selection.backend:
        _warn_once(
            f"the process group uses backend {group_backend!r} for {device.type} tensors but "
            f"accelbackends would select {selection.backend!r} for {selection.accelerator} "
            f"({selection.backend_reason})"
        )
    return used


def attach(
    *,
    device: Any = None,
    accelerator: str | None = None,
    backend: str | None = None,
    registry: Registry | None = None,
) -> Context:
    """Describe the process group that is already initialised, whoever made it.

    After `accelbackends.init()`, returns the context `init()` made. Warns once
    (`AccelBackendsWarning`) when the group's backend or `device` differs from what
    accelbackends would select. The context does not own the group: `accelbackends.destroy()`
    leaves it alone; tear it down the framework's way.

    Args:
        device: The device the framework trains on (e.g. `accelerator.device`,
            `fabric.device`); default: torch's current accelerator device where this process
            has started that device's runtime (a framework made it current), else the device
            accelbackends would bind.
        accelerator: Compare with this accelerator instead of the selection's
            (`ACCELBACKENDS_ACCELERATOR`).
        backend: Compare with this backend instead of the selection's
            (`ACCELBACKENDS_BACKEND`).
        registry: Use this registry instead of the process's default.

    Raises:
        InitError: No process group is initialised, the launcher puts this process at a
            different rank or in a different world size than the group does, or a framework
            already set up in this process (Accelerate's `PartialState`, which the
            transformers `Trainer` uses; DeepSpeed's `deepspeed.comm`) sees another rank or
            world size, or runs undistributed inside a group of several ranks.
    """
    import torch
    import torch.distributed as dist

    from . import lifecycle

    workers.at_exit()  # the framework's workers finish before the interpreter finalises
    if lifecycle._state is not None:
        context = lifecycle._state.context
        check_views(context.rank, context.world_size, context.process_group_backend)
        return context
    if not (dist.is_available() and dist.is_initialized()):
        raise InitError(
            "accelbackends.attach() found no initialised process group; call it after the "
            "framework has made its group (e.g. after Accelerator(), fabric.launch() or "
            "deepspeed.init_distributed()), or call accelbackends.init() to make one"
        )
    registry = registry or default_registry()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    group_backend = str(dist.get_backend())
    # A framework that runs alone inside a group of several ranks is a wrong job, not a
    # detail to warn about: an Accelerator() made under torchrun on CPU without cpu=True sees
    # itself alone, and every rank trains on its own and exits 0 as if the job had run.
    check_views(rank, world_size, group_backend)
    cluster = _cluster_for_group(registry, rank, world_size)
    selection = select(accelerator, backend, registry=registry)
    if device is None:
        device = _framework_device(selection, cluster.local_rank)
    device = torch.device(device)
    used = _backend_used(device, selection, group_backend)
    master_port = os.environ.get("MASTER_PORT", "")
    return Context(
        rank=rank,
        world_size=world_size,
        local_rank=cluster.local_rank,
        local_world_size=cluster.local_world_size,
        node_rank=cluster.node_rank,
        device=device,
        accelerator=selection.accelerator,
        backend=used,
        process_group_backend=group_backend,
        launcher=cluster.launcher,
        master_addr=cluster.master_addr or os.environ.get("MASTER_ADDR") or None,
        master_port=cluster.master_port or (int(master_port) if master_port.isdigit() else None),
        timeout=_group_timeout(),
        rendezvous_timeout=0.0,
        seed=None,
        threads=None,
        reason=f"attached to a process group made outside accelbackends; {selection.reason}",
        selection=selection,
        cluster=cluster,
    )


def _group_timeout() -> float:
    """The default group's collective timeout in seconds; 0.0 where torch does not tell."""
    from torch.distributed import distributed_c10d as c10d

    timeout = torchcompat.group_timeout(c10d._get_default_group())
    return 0.0 if timeout is None else timeout
