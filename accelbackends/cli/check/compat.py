"""The torch calls whose spelling depends on the torch version or the device type."""

from __future__ import annotations

from typing import Any

from ...plugin import torchcompat
from ...plugin.torchcompat import default_store  # only the heartbeat uses it

__all__ = [
    "backend_library_version",
    "point_to_point_problem",
    "default_store",
    "gather_single",
    "synchronize",
    "torch_dtype",
]

#: The distributions that carry a backend's library, where torch does not report its version.
_BACKEND_DISTRIBUTIONS = {
    "ccl": ("oneccl_bind_pt", "oneccl-bindings-for-pytorch"),
    "hccl": ("habana-torch-plugin",),
}


def point_to_point_problem(backend: str, device: Any) -> str | None:
    """Why ``send``/``recv`` of tensors on ``device`` cannot run over ``backend``, or None.

    Gloo's point-to-point path hands the tensor's address to its TCP transport as it is: a GPU
    tensor there aborts the process ("writev ... Bad address", seen with torch 2.11 on an H200),
    where Gloo's collectives stage GPU tensors through the host."""
    kind = getattr(device, "type", "cpu")
    if backend == "gloo" and kind != "cpu":
        return f"Gloo sends and receives host tensors only, not {kind} ones"
    return None


def backend_library_version(backend: str) -> str | None:
    """The version of the library behind ``backend`` where it is known (NCCL/RCCL from torch,
    oneCCL and HCCL from their bindings' metadata); None for Gloo (built into torch)."""
    if backend in torchcompat.NCCL_BACKENDS:
        try:
            import torch

            version = torch.cuda.nccl.version()
        except Exception:
            return None
        return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    from ...plugin.packages import installed

    found = installed(*_BACKEND_DISTRIBUTIONS.get(backend, ()))
    return found.version if found else None


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
