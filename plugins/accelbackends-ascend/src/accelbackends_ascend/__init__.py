"""Huawei Ascend NPUs for accelbackends: torch's ``npu`` device, with ``hccl``.

The accelerator is named ``npu`` after torch's device type (``ACCELBACKENDS_ACCELERATOR=npu``);
the plugin is named ``ascend`` (``ACCELBACKENDS_DISABLE=ascend`` blocks it).

- Detection (:mod:`.probe`) reads the device nodes the Ascend driver creates
  (``/dev/davinci<N>`` per NPU, and the ``davinci_manager``, ``devmm_svm`` and ``hisi_hdc``
  control nodes every process needs), the driver's ``version.info``, and whether ``torch_npu``
  is installed, from its package metadata. It imports neither torch nor ``torch_npu``.
- Binding (:mod:`.runtime`) imports ``torch_npu`` and calls ``torch.npu.set_device`` with the
  local rank, among the NPUs ``ASCEND_RT_VISIBLE_DEVICES`` leaves visible (:mod:`.visible`).
- The backend is ``cpu:gloo,npu:hccl``: Ascend's HCCL for NPU tensors, Gloo for CPU tensors.
  Habana's ``habana_frameworks`` registers a backend under the same name ``hccl``, and torch
  keeps only the last registration, so ``init()`` refuses to start when the ``hccl`` torch has
  is not ``torch_npu``'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from accelbackends import plugin

from .probe import detect
from .runtime import backend_options, bind, confirm, hccl_owner

__all__ = ["PRIORITY", "SPEC", "accelbackends_declare_accelerators", "hccl_owner"]

__version__ = "0.1.0"

#: Above Gaudi (200) and Intel GPUs (100), below CUDA (300): an Ascend NPU is a dedicated
#: training accelerator, and Ascend, Gaudi and NVIDIA devices do not share a node in practice.
PRIORITY = 250

SPEC = plugin.AcceleratorSpec(
    name="npu",
    device_type="npu",
    priority=PRIORITY,
    backends=("hccl", "gloo"),
    default_backend="hccl",
    detect=detect,
    bind=bind,
    backend_options=backend_options,
    confirm=confirm,
    description="Huawei Ascend NPUs (torch_npu) with HCCL",
)


@plugin.hookimpl
def accelbackends_declare_accelerators() -> Sequence[plugin.AcceleratorSpec]:
    return [SPEC]
