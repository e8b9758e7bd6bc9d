"""Fake ``torch_npu`` (Huawei Ascend): registers a backend named ``hccl`` for the ``npu`` device,
as the real package does, which replaces Habana's registration of the same name. Test code
only."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch.distributed as dist

from accelbackends.testing.fakes.runtime import gloo


def _create_process_group_hccl(store: Any, rank: int, size: int, timeout: timedelta) -> Any:
    return gloo(store, rank, size, timeout)


dist.Backend.register_backend("hccl", _create_process_group_hccl, devices=["npu"])
