"""What the frameworks already in this process think the job is, against the process group.

`attach()` describes a group someone else made; before it does, every framework state it can see
is compared with that group, and a disagreement is an `InitError` naming both views: a framework
that thinks it runs alone inside a group of several ranks trains on its own and exits 0.

Only frameworks already imported are looked at (`sys.modules`): a framework that is not imported
has no state, and importing one to ask it would cost seconds and could initialise it.

- **Accelerate** (and the transformers `Trainer`, whose `TrainingArguments.parallel_mode` is
  `NOT_PARALLEL` exactly when its Accelerate `PartialState` is `DistributedType.NO`): the shared
  state of `PartialState`, read without constructing one (a constructor would initialise it).
- **DeepSpeed**: the communication backend `deepspeed.comm` made (`deepspeed.comm.comm.cdb`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from ..plugin.errors import InitError

__all__ = ["View", "check_views", "views"]


@dataclass(frozen=True)
class View:
    """One framework's idea of this process's place in the job.

    Attributes:
        framework: Who says it, as a user knows it ("Accelerate's PartialState").
        rank: The rank it gives this process.
        world_size: The number of processes it trains with.
        distributed: Whether it runs distributed at all (Accelerate's `DistributedType.NO`
            says no, whatever the group's size).
        detail: What it said it with, for the message.
    """

    framework: str
    rank: int
    world_size: int
    distributed: bool
    detail: str


def _accelerate() -> View | None:
    state_module = sys.modules.get("accelerate.state")
    if state_module is None:
        return None
    shared: Any = getattr(getattr(state_module, "PartialState", None), "_shared_state", None)
    if not shared or "num_processes" not in shared:
        return None  # no Accelerator, PartialState or Trainer made yet
    kind = shared.get("distributed_type")
    kind_name = str(getattr(kind, "value", kind))
    users = "Accelerate's PartialState"
    if "transformers" in sys.modules:
        users += " (which the transformers Trainer's TrainingArguments use)"
    return View(
        framework=users,
        rank=int(shared.get("process_index", 0)),
        world_size=int(shared["num_processes"]),
        distributed=kind_name not in ("NO", "DistributedType.NO"),
        detail=f"distributed_type={kind_name}",
    )


def _deepspeed() -> View | None:
    comm = sys.modules.get("deepspeed.comm.comm")
    backend = getattr(comm, "cdb", None) if comm is not None else None
    if backend is None:
        return None
    try:
        if not backend.is_initialized():
            return None
        rank, world_size = int(backend.get_rank()), int(backend.get_world_size())
    except Exception:  # a backend of another kind (MPI, CCL) that cannot answer here
        return None
    return View(
        framework="DeepSpeed's communication backend (deepspeed.comm)",
        rank=rank,
        world_size=world_size,
        distributed=True,
        detail=f"backend {getattr(backend, 'name', type(backend).__name__)}",
    )


def views() -> tuple[View, ...]:
    """The view of every framework already imported and set up in this process."""
    found = (_accelerate(), _deepspeed())
    return tuple(view for view in found if view is not None)


def check_views(rank: int, world_size: int, backend: str) -> None:
    """Raise `InitError` where a framework's view differs from the group's (rank ``rank`` of
    ``world_size`` on ``backend``)."""
    for view in views():
        alone = world_size > 1 and not view.distributed
        if not alone and (view.rank, view.world_size) == (rank, world_size):
            continue
        raise InitError(
            f"{view.framework} sees process {view.rank} of {view.world_size} ({view.detail}), "
            f"but the process group is rank {rank} of {world_size} ({backend}): every rank "
            "would train on its own and exit as if the job had run. Call accelbackends.init() "
            "before creating the Accelerator, TrainingArguments or engine (it sets LOCAL_RANK, "
            "WORLD_SIZE and ACCELERATE_USE_CPU for them), or on CPU pass Accelerator(cpu=True) "
            "/ TrainingArguments(use_cpu=True)"
        )
