"""Fake ``oneccl_bindings_for_pytorch``: registers ``ccl`` for CPU and XPU tensors, as the real
bindings do, over Gloo. Test code only.

The real bindings initialise oneCCL when they are imported, reading the ``CCL_*`` variables
then; `ccl_environment_at_import` records what they were, so a test can check that the
plugin set them first.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from accelbackends.testing.fakes.runtime import gloo

__version__ = "2.6.0+xpu"

ccl_environment_at_import = {k: v for k, v in os.environ.items() if k.startswith("CCL_")}


def _create_process_group_ccl(store: Any, rank: int, size: int, timeout: timedelta) -> Any:
    return gloo(store, rank, size, timeout)


dist.Backend.register_backend("ccl", _create_process_group_ccl, devices=["xpu", "cpu"])
