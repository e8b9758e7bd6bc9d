"""Accelerate and the transformers `Trainer` on the process group accelbackends made.

Accelerate decides from the environment, not from `torch.distributed`, whether it runs
distributed: `LOCAL_RANK` (or `WORLD_SIZE` > 1) must be set, and a CPU group is used only
with `Accelerator(cpu=True)`, `TrainingArguments(use_cpu=True)` or `ACCELERATE_USE_CPU`.
Otherwise `Accelerator()` reports `DistributedType.NO` and every rank trains alone.

`accelbackends.init` therefore exports, for a group of more than one rank and where they
are not set already, `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE` and either
`ACCELERATE_USE_CPU=true` (CPU selected) or `ACCELERATE_TORCH_DEVICE` (the bound device);
`destroy()` removes them again. Accelerate's `PartialState` then finds the group initialised
and uses it as it is. `verify` checks afterwards that Accelerate sees the same job.

Importing this module does not import Accelerate; `verify` does.
"""

from __future__ import annotations

from typing import Any

from ..plugin.errors import InitError
from ..plugin.types import Context

__all__ = ["verify"]


def verify(state: Any = None) -> Context:
    """Check that Accelerate's view of the job is the process group's, and return the
    `accelbackends.Context` of that group (`accelbackends.attach`).

    Args:
        state: An `Accelerator`, `AcceleratorState` or `PartialState`; default:
            Accelerate's `PartialState()` (which initialises it if nothing has yet).

    Raises:
        InitError: Accelerate's process index or number of processes differs from the
            group's, or it does not run distributed although the group has several ranks.
    """
    from ..job.attach import attach

    if state is None:
        from accelerate import PartialState

        state = PartialState()
    context = attach(device=state.device)
    accelerate_view = (state.process_index, state.num_processes)
    if accelerate_view != (context.rank, context.world_size) or (
        context.world_size > 1 and str(state.distributed_type).endswith("NO")
    ):
        raise InitError(
            f"Accelerate sees process {state.process_index} of {state.num_processes} "
            f"({state.distributed_type}), but the process group is rank {context.rank} of "
            f"{context.world_size} ({context.process_group_backend}); every rank would train "
            "on its own. Create the Accelerator after accelbackends.init() (which sets "
            "LOCAL_RANK, WORLD_SIZE and ACCELERATE_USE_CPU for it), or pass cpu=True"
        )
    return context
