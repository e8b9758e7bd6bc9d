"""The torch calls whose spelling depends on the torch version or the device type."""

from __future__ import annotations

from typing import Any

__all__ = ["gather_single", "synchronize", "torch_dtype"]


def gather_single() -> Any:
    """``torch.distributed``'s gather of one tensor per rank into one output tensor."""
    import torch.distributed as dist

    # torch 2.13 renamed all_gather_into_tensor to all_gather_single; the old name warns.
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def synchronize(device: Any) -> None:
    """Wait until the device has run everything queued on it; nothing to wait for on the CPU."""
    if device.type == "cpu":
        return
    import torch

    sync = getattr(getattr(torch, device.type, None), "synchronize", None)
    if callable(sync):
        sync()
    else:
        torch.accelerator.synchronize()


def torch_dtype(name: str) -> Any:
    """``"bfloat16"`` → ``torch.bfloat16``."""
    import torch

    return getattr(torch, name)
