"""Fake ``habana_frameworks.torch.distributed.hccl``: registers ``hccl`` for the ``hpu`` device
with the extended creator API, as the real module does, over Gloo. Test code only."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from accelbackends.testing.fakes.runtime import gloo_extended


def _create_process_group_hccl(options: Any, pg_options: Any) -> Any:
    return gloo_extended(options, pg_options)


dist.Backend.register_backend(
    "hccl", _create_process_group_hccl, extended_api=True, devices=["hpu"]
)
