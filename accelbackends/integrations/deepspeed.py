"""DeepSpeed on the accelerator accelbackends selected.

DeepSpeed detects its accelerator once, at the first `get_accelerator()`, with its own chain
(and no notion of accelbackends' plugins); `DS_ACCELERATOR` overrides that chain, and its
names (`cpu`, `cuda`, `xpu`, `hpu`, `npu`…) are accelbackends' built-in names.
`init_distributed` sets it from the selection before DeepSpeed looks, makes the process
group with `accelbackends.init` unless one exists, and lets `deepspeed.init_distributed`
wrap that group instead of making its own.

Importing this module does not import DeepSpeed; `init_distributed` does.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..job.environ import DEEPSPEED_ACCELERATORS
from ..plugin.errors import ConfigError, InitError
from ..plugin.types import Context

__all__ = ["init_distributed", "select_accelerator"]


def select_accelerator(accelerator: str) -> None:
    """Set `DS_ACCELERATOR` to `accelerator`, failing if DeepSpeed already chose another.

    Raises:
        ConfigError: DeepSpeed has no accelerator of that name, or `DS_ACCELERATOR` names
            another one.
        InitError: DeepSpeed already detected a different accelerator in this process.
    """
    if accelerator not in DEEPSPEED_ACCELERATORS:
        raise ConfigError(
            f"accelbackends selected accelerator {accelerator!r}, which DeepSpeed has no "
            f"accelerator for (DeepSpeed's that accelbackends knows: "
            f"{', '.join(sorted(DEEPSPEED_ACCELERATORS))})"
        )
    current = os.environ.get("DS_ACCELERATOR")
    if current not in (None, accelerator):
        raise ConfigError(
            f"DS_ACCELERATOR={current!r} but accelbackends selected {accelerator!r}; unset "
            f"DS_ACCELERATOR or set ACCELBACKENDS_ACCELERATOR={current}"
        )
    real = sys.modules.get("deepspeed.accelerator.real_accelerator")
    chosen = getattr(real, "ds_accelerator", None)
    if chosen is not None and chosen.device_name() != accelerator:
        raise InitError(
            f"DeepSpeed already detected accelerator {chosen.device_name()!r} in this process, "
            f"but accelbackends selected {accelerator!r}; call init_distributed() before "
            "anything asks deepspeed.get_accelerator()"
        )
    os.environ["DS_ACCELERATOR"] = accelerator


def init_distributed(**init_kwargs: Any) -> Context:
    """Hand DeepSpeed the selected accelerator, make the process group with
    `accelbackends.init` (`init_kwargs` go to it) unless a group exists, and call
    `deepspeed.init_distributed()` on it; returns the group's context.

    Raises:
        InitError: DeepSpeed's rank or world size differs from the process group's.
    """
    import torch.distributed as dist

    from ..job.attach import attach
    from ..job.lifecycle import init

    context = attach() if dist.is_initialized() else init(**init_kwargs)
    select_accelerator(context.accelerator)
    import deepspeed
    from deepspeed import comm

    deepspeed.init_distributed(dist_backend=context.backend, auto_mpi_discovery=False)
    deepspeed_view = (comm.get_rank(), comm.get_world_size())
    if deepspeed_view != (context.rank, context.world_size):
        raise InitError(
            f"DeepSpeed sees rank {deepspeed_view[0]} of {deepspeed_view[1]}, but the process "
            f"group is rank {context.rank} of {context.world_size}"
        )
    return context
