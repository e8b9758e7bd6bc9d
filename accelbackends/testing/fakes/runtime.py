"""What the fake vendor packages share: Gloo standing in for a vendor's collectives, and the fake
XPU torch build. Test code only.

The fake packages register their backend names with ``torch.distributed`` exactly as the real
ones do, but the process groups they create are Gloo, so collectives really run between the
ranks, on CPU tensors.

The XPU part stands in for an XPU build of torch, which this CPU build is not:
``torch.xpu.is_available()`` must say yes, and ``xccl`` is a built-in backend name whose
availability flag is compiled in: registering a fake ``xccl`` appears to work, but
``init_process_group`` then says "Distributed package doesn't have XCCL built in". So the fake
sets the flag torch's own check reads (``distributed_c10d._XCCL_AVAILABLE``) and the class it
instantiates (``ProcessGroupXCCL``), which makes that check agree.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from datetime import timedelta
from types import ModuleType
from typing import Any

from accelbackends.plugin.torchcompat import mark_xccl_available

__all__ = [
    "HPU_DEVICES",
    "NPU_DEVICES",
    "XCCL",
    "XPU_DEVICES",
    "gloo",
    "gloo_extended",
    "install_torch_hook",
    "patch_torch",
]

#: How many Gaudi modules the fake habana_frameworks reports.
HPU_DEVICES = "FAKESTACK_HPU_DEVICES"
#: How many Ascend NPUs the fake torch_npu finds on the node (before ASCEND_RT_VISIBLE_DEVICES).
NPU_DEVICES = "FAKESTACK_NPU_DEVICES"
#: How many XPUs the fake XPU torch build reports (unset: torch is left alone).
XPU_DEVICES = "FAKESTACK_XPU_DEVICES"
#: ``1``: the fake XPU torch build has ``xccl`` built in.
XCCL = "FAKESTACK_XCCL"


def gloo(store: Any, rank: int, size: int, timeout: timedelta) -> Any:
    """A Gloo process group: the collectives behind every fake backend."""
    from torch.distributed import ProcessGroupGloo

    return ProcessGroupGloo(store, rank, size, timeout)


def gloo_extended(options: Any, pg_options: Any) -> Any:
    """`gloo` for ``register_backend(..., extended_api=True)`` creators."""
    return gloo(options.store, options.group_rank, options.group_size, options.timeout)


def _count(variable: str) -> int:
    value = os.environ.get(variable, "").strip()
    return int(value) if value.isdigit() else 0


def patch_torch(torch: ModuleType) -> None:
    """Make this CPU torch look like an XPU build, as `XPU_DEVICES` and `XCCL` say."""
    devices = _count(XPU_DEVICES)
    if devices:
        current = [0]

        def set_device(device: Any) -> None:
            index = device if isinstance(device, int) else torch.device(device).index or 0
            if not 0 <= index < devices:
                raise RuntimeError(f"fake XPU: device {index} out of range ({devices} devices)")
            current[0] = index

        xpu = torch.xpu
        xpu.is_available = lambda: True
        xpu.device_count = lambda: devices
        xpu.set_device = set_device
        xpu.current_device = lambda: current[0]
    if os.environ.get(XCCL) == "1":

        class ProcessGroupXCCL:
            """Stands in for the compiled ``ProcessGroupXCCL``: same constructor, Gloo inside."""

            class Options:
                def __init__(self) -> None:
                    self.global_ranks_in_group: list[int] = []
                    self.group_name = ""
                    self._timeout = timedelta(minutes=30)

            def __new__(cls, store: Any, rank: int, size: int, options: Any) -> Any:
                return gloo(store, rank, size, options._timeout)

        mark_xccl_available(ProcessGroupXCCL)


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        patch_torch(module)

    def __getattr__(self, name: str) -> Any:  # resource readers and the like
        return getattr(self._inner, name)


class _TorchFinder(importlib.abc.MetaPathFinder):
    """Finds ``torch`` through the other finders and patches it once it has loaded."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


def install_torch_hook() -> None:
    """Patch torch as soon as it is imported (or now, if it already is)."""
    if "torch" in sys.modules:
        patch_torch(sys.modules["torch"])
    elif not any(isinstance(finder, _TorchFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _TorchFinder())
