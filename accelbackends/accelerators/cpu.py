"""CPU with Gloo: always available, the fallback every other accelerator is measured against."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..plugin import AcceleratorSpec, BindRequest, Detection, Probe, hookimpl
from ..plugin.threads import available_cores, intra_op_threads, threads_per_rank

__all__ = ["PRIORITY", "SPEC", "available_cores", "intra_op_threads", "threads_per_rank"]

#: Lowest of the built-ins: any real accelerator that is available wins over the CPU.
PRIORITY = 0


def _detect(probe: Probe) -> Detection:
    cores = available_cores()
    return Detection(True, 1, f"always available ({cores} cores for this process)")


def _bind(request: BindRequest) -> Any:
    import torch

    threads, _ = intra_op_threads(request)
    if threads is not None:
        torch.set_num_threads(threads)
    return torch.device("cpu")


SPEC = AcceleratorSpec(
    name="cpu",
    device_type="cpu",
    priority=PRIORITY,
    backends=("gloo",),
    default_backend="gloo",
    detect=_detect,
    bind=_bind,
    description="CPU processes talking over Gloo",
)


@hookimpl
def accelbackends_declare_accelerators() -> Sequence[AcceleratorSpec]:
    return [SPEC]
