"""How the ranks agree on a number: the largest value any rank saw.

Below the session, the sweep and the bandwidth measurement, which all ask it, so that none of
them imports another for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...plugin.types import Context

__all__ = ["max_over_ranks"]


def max_over_ranks(ctx: Context, control: Any, values: Sequence[float]) -> list[float]:
    """The elementwise maximum of ``values`` over the ranks, through ``control``."""
    import torch
    import torch.distributed as dist

    tensor = torch.tensor(list(values), dtype=torch.float64)
    if control is None and ctx.device.type != "cpu":
        # The default group may reach only the device; not every device backend has float64.
        tensor = tensor.to(device=ctx.device, dtype=torch.float32)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=control)
    return [float(v) for v in tensor.cpu().tolist()]
