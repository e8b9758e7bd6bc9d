"""How many intra-op threads a rank uses: the cores it may run on, shared by the ranks of its node.

One rule for every accelerator plugin that binds CPU work (the built-in ``cpu`` at bind) and for
the core, which applies it again after pinning a rank with CPU affinity.
"""

from __future__ import annotations

import os

from .types import BindRequest

__all__ = ["available_cores", "intra_op_threads", "threads_per_rank"]


def available_cores() -> int:
    """Cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def threads_per_rank(local_world_size: int, cores: int | None = None) -> int:
    """Cores divided evenly between the ranks of this node, at least one each."""
    return max(1, (available_cores() if cores is None else cores) // max(1, local_world_size))


def intra_op_threads(request: BindRequest) -> tuple[int | None, str]:
    """How many intra-op threads this rank should use, and why (None: leave torch alone).

    The user's choice wins: ``init(threads=...)``, else ``OMP_NUM_THREADS``, except that
    torchrun sets ``OMP_NUM_THREADS=1`` for every worker of a multi-process node by default
    (torch/distributed/run.py), which would leave all but one core idle; under torchrun a value
    of 1 is taken as that default, not as the user's. A rank pinned by CPU affinity uses as
    many threads as it has CPUs.
    """
    if request.threads is not None:
        return request.threads, "threads= argument"
    omp = request.env.get("OMP_NUM_THREADS", "").strip()
    torchrun_default = request.cluster.launcher == "torchrun" and omp == "1"
    if omp and not torchrun_default:
        return None, "OMP_NUM_THREADS is set"
    if request.cpus:
        return len(request.cpus), f"{len(request.cpus)} CPUs pinned by CPU affinity"
    return threads_per_rank(request.local_world_size), (
        f"{available_cores()} cores / {request.local_world_size} local ranks"
    )
