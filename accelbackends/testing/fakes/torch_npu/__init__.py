"""Fake ``torch_npu`` (Huawei Ascend). Test code only.

On import it does what the real package does to torch: names the PrivateUse1 device ``npu``,
registers `torch_npu.npu` as ``torch.npu``, and registers a backend named ``hccl`` for the
``npu`` device, which replaces Habana's registration of the same name. The process groups it
creates are Gloo, so collectives really run between the ranks, on CPU tensors.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from accelbackends.plugin.torchcompat import privateuse1_backend_name, register_device_module
from accelbackends.testing.fakes.runtime import gloo

from . import npu

if privateuse1_backend_name() != "npu":
    torch.utils.rename_privateuse1_backend("npu")
if not hasattr(torch, "npu"):
    register_device_module("npu", npu)


def _create_process_group_hccl(store: Any, rank: int, size: int, timeout: timedelta) -> Any:
    return gloo(store, rank, size, timeout)


dist.Backend.register_backend("hccl", _create_process_group_hccl, devices=["npu"])

__all__ = ["npu"]
