"""What step 4 measures: the timing of one swept operation at one size, and the bandwidths
derived from it by the nccl-tests definitions. ``benchmarks/`` times through this too."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .agree import max_over_ranks
from .compat import gather_single, synchronize, torch_dtype
from .sizes import format_size

if TYPE_CHECKING:
    from ...plugin.types import Context

__all__ = [
    "AUTO_MAX_ITERS",
    "AUTO_MIN_ITERS",
    "AUTO_SECONDS_PER_SIZE",
    "DEFAULT_WARMUP",
    "OPS",
    "Measurement",
    "bus_bandwidth",
    "measure",
]

DEFAULT_WARMUP = 2
#: Automatic iterations aim at this much timed work per size, within the bounds below; the
#: estimate is the slowest rank's fastest warm-up call.
AUTO_SECONDS_PER_SIZE = 0.1
AUTO_MIN_ITERS, AUTO_MAX_ITERS = 5, 200

#: The swept operations and their nccl-tests bus-bandwidth factor for n ranks.
OPS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
}


@dataclass(frozen=True)
class Measurement:
    """One size of one swept operation; ``seconds`` is the slowest rank's mean per call.

    ``nbytes`` follows nccl-tests: the buffer size for all_reduce, the *total output* size
    (each rank's input times the ranks) for all_gather.
    """

    op: str
    nbytes: int
    dtype: str
    iters: int
    seconds: float
    world_size: int
    #: The method's own noise at this size: how far the two halves of the timed calls differ,
    #: relative to their mean (None with one call). A baseline comparison shows it beside
    #: the ratio, as the benchmark shows the reference's ratio to itself.
    noise: float | None = None

    @property
    def algbw(self) -> float:
        """Algorithm bandwidth, bytes per second: nbytes / seconds."""
        return self.nbytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def busbw(self) -> float:
        """Bus bandwidth, bytes per second, as nccl-tests defines it."""
        return bus_bandwidth(self.op, self.algbw, self.world_size)

    def row(self) -> tuple[str, ...]:
        """The cells of the text table, in the order of its columns."""
        return (
            self.op,
            format_size(self.nbytes),
            f"{self.seconds * 1e6:.1f}",
            f"{self.algbw / 1e9:.3f}",
            f"{self.busbw / 1e9:.3f}",
            str(self.iters),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "bytes": self.nbytes,
            "dtype": self.dtype,
            "iters": self.iters,
            "time_us": round(self.seconds * 1e6, 3),
            "algbw_gbps": round(self.algbw / 1e9, 6),
            "busbw_gbps": round(self.busbw / 1e9, 6),
            "noise": None if self.noise is None else round(self.noise, 4),
        }


def bus_bandwidth(op: str, algbw: float, world_size: int) -> float:
    """nccl-tests' bus bandwidth: all_reduce algbw x 2(n-1)/n, all_gather algbw x (n-1)/n."""
    return algbw * OPS[op](world_size)


def measure(
    ctx: Context,
    op: str,
    nbytes: int,
    *,
    iters: int | None = None,
    warmup: int = DEFAULT_WARMUP,
    dtype: str = "float32",
    control: Any = None,
) -> Measurement:
    """Time ``op`` on ``nbytes`` as ``check`` reports it. Collective: every rank calls it.

    Warm-up calls, a barrier, ``iters`` calls back to back in two halves with a device
    synchronisation after each; the result is the slowest rank's mean, and the halves' difference
    is the noise. With ``iters=None`` the count follows from the slowest
    rank's fastest warm-up call (so at least one warm-up call runs). ``control`` is the group
    that carries the timings (the default group when None).
    """
    import torch.distributed as dist

    call, counted = _timed_call(ctx, op, nbytes, dtype)
    fastest = math.inf
    for _ in range(warmup if iters is not None else max(1, warmup)):
        begin = time.perf_counter()
        call()
        synchronize(ctx.device)
        fastest = min(fastest, time.perf_counter() - begin)
    if iters is None:
        estimate = max_over_ranks(ctx, control, [fastest])[0]
        wanted = round(AUTO_SECONDS_PER_SIZE / max(estimate, 1e-9))
        iters = min(AUTO_MAX_ITERS, max(AUTO_MIN_ITERS, wanted))
    dist.barrier()
    synchronize(ctx.device)
    half = iters // 2
    begin = time.perf_counter()
    for _ in range(half):
        call()
    synchronize(ctx.device)
    middle = time.perf_counter()
    for _ in range(iters - half):
        call()
    synchronize(ctx.device)
    end = time.perf_counter()
    mean = (end - begin) / iters
    if half:
        first, second = (middle - begin) / half, (end - middle) / (iters - half)
    else:
        first = second = mean
    slowest, first, second = max_over_ranks(ctx, control, [mean, first, second])
    noise = abs(first - second) / ((first + second) / 2) if half and first + second > 0 else None
    return Measurement(op, counted, dtype, iters, slowest, ctx.world_size, noise)


def _timed_call(ctx: Context, op: str, nbytes: int, dtype: str) -> tuple[Callable[[], Any], int]:
    """The call to time, on buffers made here, and the bytes it counts (whole elements)."""
    import torch
    import torch.distributed as dist

    kind = torch_dtype(dtype)
    size = torch.tensor([], dtype=kind).element_size()
    if op == "all_reduce":
        count = max(1, nbytes // size)
        # Zeros stay zeros when summed: no denormal or infinite values slow the arithmetic.
        buffer = torch.zeros(count, dtype=kind, device=ctx.device)
        return functools.partial(dist.all_reduce, buffer), count * size
    if op == "all_gather":
        count = max(1, nbytes // (size * ctx.world_size))
        source = torch.zeros(count, dtype=kind, device=ctx.device)
        output = torch.empty(count * ctx.world_size, dtype=kind, device=ctx.device)
        return functools.partial(gather_single(), output, source), count * size * ctx.world_size
    raise ValueError(f"op={op!r} is not swept; use one of {', '.join(OPS)}")
