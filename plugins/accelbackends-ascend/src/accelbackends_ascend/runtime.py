"""What runs inside ``init()`` for the selected ``npu`` accelerator: the deep check, binding,
and the backend options. Each imports torch and ``torch_npu`` when called, never before.

``torch_npu`` on import names torch's PrivateUse1 device ``npu``, registers ``torch.npu``, and
registers its HCCL process group under the backend name ``hccl`` for the ``npu`` device. Habana's
``habana_frameworks.torch.distributed.hccl`` registers a different HCCL under the same name for
``hpu``, and ``Backend.register_backend`` silently replaces an earlier registration (torch 2.13):
whichever was imported last wins. :func:`hccl_owner` tells which one torch has.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from accelbackends import plugin

from .visible import VARIABLE, device_index, parse_visible

__all__ = ["backend_options", "bind", "confirm", "hccl_owner"]


def _import_torch_npu() -> Any:
    """``torch`` after ``import torch_npu``, which gives it the ``npu`` device."""
    import torch

    importlib.import_module("torch_npu")
    return torch


def confirm() -> str | None:
    """None when torch agrees that an NPU can be used, else the reason it does not."""
    try:
        torch = _import_torch_npu()
    except Exception as exc:
        return f"import torch_npu failed ({type(exc).__name__}: {exc})"
    npu = getattr(torch, "npu", None)
    if npu is None:
        return "torch_npu was imported but torch.npu does not exist; reinstall torch-npu"
    if not npu.is_available():
        return (
            "torch.npu.is_available() is False: the driver may not be loaded (npu-smi info "
            f"says), or {VARIABLE} hides every NPU"
        )
    return None


def bind(request: plugin.BindRequest) -> Any:
    """``torch.npu.set_device`` with the local rank's NPU among the visible ones."""
    visible = parse_visible(request.env)
    torch = _import_torch_npu()
    # The runtime has applied ASCEND_RT_VISIBLE_DEVICES already: this counts the visible NPUs.
    index = device_index(
        request.local_rank,
        request.local_world_size,
        int(torch.npu.device_count()),
        visible,
        request.env,
    )
    torch.npu.set_device(index)
    return torch.device("npu", index)


def hccl_owner(plugins: Mapping[str, Any], capability: Mapping[str, Sequence[str]]) -> str | None:
    """Why the registered ``hccl`` backend is not Ascend's, or None when it is.

    :param plugins: ``torch.distributed.Backend._plugins``: registered creators by upper-case
        backend name; the module that defined the creator tells who registered it.
    :param capability: ``torch.distributed.Backend.backend_capability``: devices by name.
    """
    registered = plugins.get("HCCL")
    if registered is None:
        return (
            "no backend named 'hccl' is registered although torch_npu was imported; "
            "reinstall torch-npu, or use ACCELBACKENDS_BACKEND=gloo"
        )
    module = str(getattr(getattr(registered, "creator_fn", None), "__module__", "") or "")
    devices = list(capability.get("hccl", ()))
    if module.split(".")[0] == "torch_npu" and "npu" in devices:
        return None
    if module.split(".")[0] == "habana_frameworks":
        owner = "Habana's habana_frameworks"
        fix = (
            "do not import habana_frameworks.torch.distributed.hccl in an Ascend job, or "
            "uninstall habana-torch-plugin on Ascend nodes"
        )
    else:
        owner = f"module {module!r}"
        fix = f"do not import {module or 'that module'} in an Ascend job"
    return (
        f"the backend name 'hccl' is registered by {owner} (devices {devices}), not by "
        "torch_npu: torch keeps only the last registration of a name, so this process would "
        f"initialise the wrong HCCL. Refusing to start: {fix}; or use ACCELBACKENDS_BACKEND=gloo"
    )


@plugin.gloo_or
def backend_options(request: plugin.OptionsRequest) -> plugin.BackendOptions:
    """``cpu:gloo,npu:hccl`` after checking that the ``hccl`` torch has is Ascend's (plain
    options where Gloo is asked for)."""
    try:
        _import_torch_npu()
    except Exception as exc:
        raise plugin.InitError(
            f"backend hccl needs torch_npu, which cannot be imported ({type(exc).__name__}: "
            f"{exc}); check the torch-npu installation"
        ) from exc
    import torch.distributed as dist

    problem = hccl_owner(
        plugin.torchcompat.backend_plugins(), getattr(dist.Backend, "backend_capability", {})
    )
    if problem:
        raise plugin.InitError(problem)
    # Gloo serves CPU tensors beside HCCL's NPU tensors.
    return plugin.BackendOptions("cpu:gloo,npu:hccl", request.timeout)
