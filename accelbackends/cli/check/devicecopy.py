"""What one rank can measure on its own: a memory copy on its device.

A collective of one rank moves no data (a one-rank all_reduce of 1 GiB returns in microseconds
on an H200), so ``check`` with one rank measures no collective bandwidth. It times this instead:
``dst.copy_(src)`` on the rank's device, the device synchronised around the timed copies. The
rate counts every byte read *and* every byte written (twice the buffer per copy), as memory
bandwidth figures do; it is not a collective bandwidth and is never reported as one.

`measure_copy` takes a device, not a process group, so a per-rank device health check can call it
on each rank and hold it to a fraction of the device's memory bandwidth. `measure_transfer` times
a copy between pinned host memory and the device, one way: what crosses the PCIe link, counted
once (a transfer reads on one side and writes on the other of one link).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .compat import synchronize
from .sizes import MIB, format_size

__all__ = [
    "COPY_BYTES_ACCELERATOR",
    "COPY_BYTES_CPU",
    "COPY_ITERS",
    "COPY_LABEL",
    "COPY_WARMUP",
    "QUICK_COPY_BYTES_ACCELERATOR",
    "QUICK_COPY_BYTES_CPU",
    "DEVICE_TO_HOST",
    "HOST_TO_DEVICE",
    "CopyMeasurement",
    "TransferMeasurement",
    "copy_size",
    "measure_copy",
    "measure_transfer",
]

#: What the rate counts, in the text and in the JSON, so it is not read as a collective's.
COPY_LABEL = "device memory copy, read+write"
COPY_COUNTS = "bytes read + bytes written per second, 2 x the buffer per copy"
#: Large enough to leave the caches behind (an H200's L2 holds about 60 MB; a copy that fits
#: in a cache reports the cache's speed), small enough for any GPU. ``--quick`` halves them and
#: copies fewer times: the copy takes milliseconds either way.
COPY_BYTES_ACCELERATOR, QUICK_COPY_BYTES_ACCELERATOR = 256 * MIB, 128 * MIB
COPY_BYTES_CPU, QUICK_COPY_BYTES_CPU = 64 * MIB, 32 * MIB
COPY_ITERS, COPY_WARMUP = 10, 2


@dataclass(frozen=True)
class CopyMeasurement:
    """One device's copy rate: ``iters`` copies of ``nbytes`` after ``warmup`` untimed ones;
    ``seconds`` is the mean per copy."""

    device: str
    nbytes: int
    iters: int
    warmup: int
    seconds: float

    @property
    def counted(self) -> int:
        """The bytes one copy moves: each byte is read once and written once."""
        return 2 * self.nbytes

    @property
    def rate(self) -> float:
        """Bytes read plus bytes written per second."""
        return self.counted / self.seconds if self.seconds > 0 else 0.0

    def text(self) -> str:
        """``device memory copy, read+write: 64 MiB on cpu, 10 copies ...: 9.61 GB/s``."""
        return (
            f"{COPY_LABEL}: {format_size(self.nbytes)} on {self.device}, {self.iters} "
            f"{'copy' if self.iters == 1 else 'copies'} after {self.warmup} warm-up, "
            f"{self.seconds * 1e6:.1f} us each: {self.rate / 1e9:.2f} GB/s ({COPY_COUNTS}; "
            "not a collective bandwidth)"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "what": COPY_LABEL,
            "counts": COPY_COUNTS,
            "device": self.device,
            "bytes": self.nbytes,
            "bytes_counted": self.counted,
            "iters": self.iters,
            "warmup": self.warmup,
            "seconds": round(self.seconds, 9),
            "gbps": round(self.rate / 1e9, 6),
        }


def copy_size(device_type: str, quick: bool = False, cap: int | None = None) -> int:
    """The buffer to copy: 256 MiB on an accelerator, 64 MiB on the CPU (``quick``: 128 and
    32 MiB), at most ``cap`` bytes where given."""
    if device_type == "cpu":
        size = QUICK_COPY_BYTES_CPU if quick else COPY_BYTES_CPU
    else:
        size = QUICK_COPY_BYTES_ACCELERATOR if quick else COPY_BYTES_ACCELERATOR
    return min(size, cap) if cap else size


def measure_copy(
    device: Any, nbytes: int, *, iters: int = COPY_ITERS, warmup: int = COPY_WARMUP
) -> CopyMeasurement:
    """Time ``iters`` copies of an ``nbytes`` buffer to another on ``device`` (a
    ``torch.device``), after ``warmup`` untimed copies; the device is synchronised before the
    first timed copy and after the last. No process group is needed. ``device`` must be the
    process's current device of its type (the one `init()` binds): `compat.synchronize` waits
    for that one."""
    import torch

    if nbytes < 1 or iters < 1 or warmup < 0:
        raise ValueError(
            f"measure_copy(nbytes={nbytes}, iters={iters}, warmup={warmup}): use nbytes >= 1, "
            "iters >= 1 and warmup >= 0"
        )
    # Ones, not empty: every page of the source is touched before the first timed copy.
    source = torch.ones(nbytes, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    for _ in range(warmup):
        target.copy_(source)
    synchronize(source.device)
    begin = time.perf_counter()
    for _ in range(iters):
        target.copy_(source)
    synchronize(source.device)
    seconds = (time.perf_counter() - begin) / iters
    return CopyMeasurement(str(source.device), nbytes, iters, warmup, seconds)


HOST_TO_DEVICE, DEVICE_TO_HOST = "host->device", "device->host"


@dataclass(frozen=True)
class TransferMeasurement:
    """One way between pinned host memory and a device: ``iters`` copies of ``nbytes`` after
    ``warmup`` untimed ones; ``seconds`` is the mean per copy; the rate counts each byte once."""

    direction: str  # HOST_TO_DEVICE or DEVICE_TO_HOST
    device: str
    nbytes: int
    iters: int
    warmup: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.nbytes / self.seconds if self.seconds > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "direction": self.direction,
            "device": self.device,
            "bytes": self.nbytes,
            "iters": self.iters,
            "warmup": self.warmup,
            "seconds": round(self.seconds, 9),
            "gbps": round(self.rate / 1e9, 6),
        }


def measure_transfer(
    device: Any,
    nbytes: int,
    direction: str,
    *,
    iters: int = COPY_ITERS,
    warmup: int = COPY_WARMUP,
) -> TransferMeasurement:
    """Time ``iters`` copies of ``nbytes`` from pinned host memory to ``device``
    (`HOST_TO_DEVICE`) or back (`DEVICE_TO_HOST`), after ``warmup`` untimed ones, the device
    synchronised around the timed copies. Pageable memory would time the driver's staging
    copy as well, so the host side is pinned (on a ``cpu`` device, which has no link to cross,
    it is plain memory). ``device`` must be the process's current device of its type."""
    import torch

    if direction not in (HOST_TO_DEVICE, DEVICE_TO_HOST) or nbytes < 1 or iters < 1 or warmup < 0:
        raise ValueError(
            f"measure_transfer(nbytes={nbytes}, direction={direction!r}, iters={iters}, "
            f"warmup={warmup}): use nbytes >= 1, direction {HOST_TO_DEVICE!r} or "
            f"{DEVICE_TO_HOST!r}, iters >= 1 and warmup >= 0"
        )
    on_device = torch.ones(nbytes, dtype=torch.uint8, device=device)
    host = torch.ones(nbytes, dtype=torch.uint8, pin_memory=on_device.device.type != "cpu")
    source, target = (host, on_device) if direction == HOST_TO_DEVICE else (on_device, host)
    for _ in range(warmup):
        target.copy_(source, non_blocking=True)
    synchronize(on_device.device)
    begin = time.perf_counter()
    for _ in range(iters):
        target.copy_(source, non_blocking=True)
    synchronize(on_device.device)
    seconds = (time.perf_counter() - begin) / iters
    return TransferMeasurement(direction, str(on_device.device), nbytes, iters, warmup, seconds)
