"""Every private torch attribute the package touches, in one place, each with the torch versions
it is known for.

torch gives no public way to ask these questions; where a release renames or drops one of
these attributes, this is the only module to change. Nothing here imports torch at import time:
each function imports it when called, so a probe that never calls them stays torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "backend_plugins",
    "default_store",
    "mark_xccl_available",
    "privateuse1_backend_name",
    "process_group_backend",
    "register_device_module",
]


def backend_plugins() -> Mapping[str, Any]:
    """The third-party backends registered with ``torch.distributed``, by upper-case name.

    ``torch.distributed.Backend._plugins``: a dict of ``_BackendPlugin(creator_fn, extended_api)``
    filled by ``Backend.register_backend``; known for torch 2.4 to 2.13 (it is how torch itself
    finds a registered backend in ``new_group``). Empty where a torch has no such attribute.
    """
    import torch.distributed as dist

    plugins: Mapping[str, Any] = getattr(dist.Backend, "_plugins", {})
    return plugins


def register_device_module(device_type: str, module: Any) -> None:
    """Make ``module`` reachable as ``torch.<device_type>``, as vendor packages do on import.

    ``torch._register_device_module``: known for torch 2.4 to 2.13 (torch_npu and
    habana_frameworks call it; the testing kit's fake stacks imitate them).
    """
    import torch

    torch._register_device_module(device_type, module)


def privateuse1_backend_name() -> str:
    """The name the PrivateUse1 device is registered under (``privateuseone`` until renamed).

    ``torch._C._get_privateuse1_backend_name``: known for torch 2.1 to 2.13.
    """
    import torch

    return str(torch._C._get_privateuse1_backend_name())


def mark_xccl_available(process_group_class: Any) -> None:
    """Make ``torch.distributed.is_xccl_available()`` true, with ``process_group_class`` as the
    compiled ``ProcessGroupXCCL`` (for the testing kit's fake XPU build).

    ``torch.distributed.distributed_c10d._XCCL_AVAILABLE``: the flag the public check reads;
    known for torch 2.8 to 2.13 (xccl arrived in 2.8).
    """
    import torch.distributed.distributed_c10d as c10d

    c10d._XCCL_AVAILABLE = True
    c10d.ProcessGroupXCCL = process_group_class


def process_group_backend(group: Any, device: Any) -> Any:
    """The backend object ``group`` uses for tensors on ``device``'s type.

    ``ProcessGroup._get_backend(torch.device)``: known for torch 2.4 to 2.13.
    """
    import torch

    return group._get_backend(torch.device(device.type))


def default_store() -> Any:
    """The store the default process group was initialised with, or None where torch does not
    say.

    ``torch.distributed.distributed_c10d._get_default_store()``: known for torch 1.8 to 2.13
    (it raises where no default group exists).
    """
    try:
        from torch.distributed import distributed_c10d

        return distributed_c10d._get_default_store()
    except Exception:
        return None
