"""What step 3 checks: each collective on inputs every rank can compute for itself, compared
with the values it must produce, at odd and non-power-of-two lengths."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .compat import gather_single, point_to_point_problem, torch_dtype

if TYPE_CHECKING:
    from ...plugin.types import Context

__all__ = ["DTYPES", "LENGTHS", "Check", "Verifier", "checks", "tolerance_text"]

#: Element counts of the correctness checks: odd, non-power-of-two, one above a power of two.
LENGTHS = (1, 7, 1000, 4099, 65537)
DTYPES = ("float32", "bfloat16", "int64")
_REDUCTIONS = ("sum", "max", "min", "avg")
#: Unit roundoff of the floating dtypes: a sum of n inputs rounds at most n - 1 times, an
#: average once more.
_ROUNDOFF = {"float32": 2.0**-24, "bfloat16": 2.0**-8}
_SENTINEL = 100  # never produced by _pattern, exact in every dtype checked


class Verifier:
    """Collects the first wrong value of a check without leaving its loop: a rank that left a
    check early would skip collectives the other ranks still wait in."""

    def __init__(self) -> None:
        self.mismatch = ""

    def compare(self, got: Any, expected: Any, what: str, tolerance: Any = None) -> None:
        """Elementwise; ``tolerance`` (absolute, float64) applies to floating results only."""
        import torch

        if self.mismatch:
            return
        got = got.detach().cpu()
        if not got.is_floating_point():
            wrong = got != expected
        else:
            values = got.double()
            limit = tolerance if tolerance is not None else 0.0
            wrong = ((values - expected.double()).abs() > limit) | ~torch.isfinite(values)
        if bool(wrong.any()):
            index = int(wrong.nonzero()[0, 0])
            self.mismatch = (
                f"{what}, element {index}: got {_scalar(got[index])}, expected "
                f"{_scalar(expected[index])} ({int(wrong.sum())} of {got.numel()} wrong)"
            )

    def fail(self, message: str) -> None:
        self.mismatch = self.mismatch or message


def _scalar(value: Any) -> str:
    number = value.item()
    return f"{number:g}" if isinstance(number, float) else str(number)


#: A check's body: (ctx, dtype, verifier) -> a description of what passed, or "skipped: why".
Body = Callable[["Context", str, Verifier], str]


@dataclass(frozen=True)
class Check:
    name: str
    row: str  # its row in the text grid
    dtype: str | None
    body: Body


def checks(world_size: int) -> list[Check]:
    """Every check, in the order every rank runs them."""
    found: list[Check] = []
    for op in _REDUCTIONS:
        for dtype in DTYPES:
            if op == "avg" and dtype == "int64":
                continue  # the mean of integers is not an integer
            reduce = functools.partial(_all_reduce, op)
            found.append(Check(f"all_reduce {op} {dtype}", f"all_reduce {op}", dtype, reduce))
    per_dtype: list[tuple[str, str, Body]] = [
        ("broadcast", f"broadcast from {world_size - 1}", _broadcast),
        ("all_gather", "all_gather", _all_gather),
        ("all_gather_into_tensor", "all_gather_into_tensor", _all_gather_into_tensor),
        ("reduce_scatter", "reduce_scatter sum", _reduce_scatter),
        ("all_to_all", "all_to_all", _all_to_all),
        ("send/recv ring", "send/recv ring", _send_recv_ring),
    ]
    for name, row, body in per_dtype:
        found += [Check(f"{name} {dtype}", row, dtype, body) for dtype in DTYPES]
    found.append(Check("all_gather_object", "all_gather_object", None, _all_gather_object))
    found.append(Check("barrier", "barrier", None, _barrier))
    return found


def tolerance_text(dtype: str) -> str:
    """How close a float sum or average must be, in words."""
    if dtype not in _ROUNDOFF:
        return "exact"
    return f"within (ranks+1) x 2^{int(math.log2(_ROUNDOFF[dtype]))} x sum(|x|)"


def _pattern(rank: int, n: int, dtype: str, salt: int) -> Any:
    """The input of ``rank`` as exact int64 values, computable by every rank.

    Integers in [-8, 8] are exact in bfloat16, and so are their sums up to 32 ranks; int64 adds
    multiples of 2**33, so that a backend that truncates to 32 bits is caught.
    """
    import torch

    i = torch.arange(n, dtype=torch.int64)
    small = (i * 7 + rank * 13 + salt * 5) % 17 - 8
    if dtype == "int64":
        return small + ((i * 3 + rank * 5 + salt) % 7 - 3) * 2**33
    return small


def _on_device(ctx: Context, values: Any, dtype: str) -> Any:
    return values.to(torch_dtype(dtype)).to(ctx.device)


def _sentinel(ctx: Context, n: int, dtype: str) -> Any:
    import torch

    return torch.full((n,), _SENTINEL, dtype=torch_dtype(dtype), device=ctx.device)


def _reduction_tolerance(dtype: str, inputs: Any, divisor: int = 1) -> Any:
    """(ranks + 1) x unit roundoff x sum of |inputs|, per element (None: exact)."""
    if dtype not in _ROUNDOFF:
        return None
    ranks = inputs.shape[0]
    return (ranks + 1) * _ROUNDOFF[dtype] * inputs.abs().sum(0).double() / divisor


def _all_reduce(op: str, ctx: Context, dtype: str, verify: Verifier) -> str:
    import torch
    import torch.distributed as dist

    salt = _REDUCTIONS.index(op)
    for n in LENGTHS:
        tensor = _on_device(ctx, _pattern(ctx.rank, n, dtype, salt), dtype)
        dist.all_reduce(tensor, op=getattr(dist.ReduceOp, op.upper()))
        inputs = torch.stack([_pattern(r, n, dtype, salt) for r in range(ctx.world_size)])
        if op == "max":
            verify.compare(tensor, inputs.amax(0), f"length {n}")
        elif op == "min":
            verify.compare(tensor, inputs.amin(0), f"length {n}")
        elif op == "sum":
            verify.compare(
                tensor, inputs.sum(0), f"length {n}", _reduction_tolerance(dtype, inputs)
            )
        else:
            expected = inputs.sum(0).double() / ctx.world_size
            tolerance = _reduction_tolerance(dtype, inputs, ctx.world_size)
            verify.compare(tensor, expected, f"length {n}", tolerance)
    return f"{tolerance_text(dtype) if op in ('sum', 'avg') else 'exact'} at every length"


def _broadcast(ctx: Context, dtype: str, verify: Verifier) -> str:
    import torch.distributed as dist

    root = ctx.world_size - 1  # not 0 where there are two ranks: a backend ignoring it is caught
    for n in LENGTHS:
        expected = _pattern(root, n, dtype, 4)
        tensor = _on_device(ctx, expected, dtype) if ctx.rank == root else _sentinel(ctx, n, dtype)
        dist.broadcast(tensor, src=root)
        verify.compare(tensor, expected, f"length {n}")
    return f"exact from rank {root} at every length"


def _all_gather(ctx: Context, dtype: str, verify: Verifier) -> str:
    import torch.distributed as dist

    for n in LENGTHS:
        outputs = [_sentinel(ctx, n, dtype) for _ in range(ctx.world_size)]
        dist.all_gather(outputs, _on_device(ctx, _pattern(ctx.rank, n, dtype, 5), dtype))
        for source, output in enumerate(outputs):
            verify.compare(output, _pattern(source, n, dtype, 5), f"length {n} from rank {source}")
    return "exact at every length"


def _all_gather_into_tensor(ctx: Context, dtype: str, verify: Verifier) -> str:
    import torch

    gather = gather_single()
    for n in LENGTHS:
        output = _sentinel(ctx, n * ctx.world_size, dtype)
        gather(output, _on_device(ctx, _pattern(ctx.rank, n, dtype, 6), dtype))
        expected = torch.cat([_pattern(r, n, dtype, 6) for r in range(ctx.world_size)])
        verify.compare(output, expected, f"length {n} per rank")
    return "exact at every length"


def _reduce_scatter(ctx: Context, dtype: str, verify: Verifier) -> str:
    import torch
    import torch.distributed as dist

    for n in LENGTHS:
        inputs = [
            _on_device(ctx, _pattern(ctx.rank, n, dtype, 10 + dest), dtype)
            for dest in range(ctx.world_size)
        ]
        output = _sentinel(ctx, n, dtype)
        dist.reduce_scatter(output, inputs)
        mine = torch.stack([_pattern(r, n, dtype, 10 + ctx.rank) for r in range(ctx.world_size)])
        verify.compare(output, mine.sum(0), f"length {n}", _reduction_tolerance(dtype, mine))
    return f"{tolerance_text(dtype)} at every length"


def _all_to_all(ctx: Context, dtype: str, verify: Verifier) -> str:
    import torch.distributed as dist

    for n in LENGTHS:
        inputs = [
            _on_device(ctx, _pattern(ctx.rank, n, dtype, 20 + dest), dtype)
            for dest in range(ctx.world_size)
        ]
        outputs = [_sentinel(ctx, n, dtype) for _ in range(ctx.world_size)]
        dist.all_to_all(outputs, inputs)
        for source, output in enumerate(outputs):
            expected = _pattern(source, n, dtype, 20 + ctx.rank)
            verify.compare(output, expected, f"length {n} from rank {source}")
    return "exact at every length"


def _send_recv_ring(ctx: Context, dtype: str, verify: Verifier) -> str:
    import torch.distributed as dist

    if ctx.world_size == 1:
        return "skipped: a ring needs at least 2 ranks"
    problem = point_to_point_problem(ctx.backend, ctx.device)
    if problem:
        return f"skipped: {problem}"
    after, before = (ctx.rank + 1) % ctx.world_size, (ctx.rank - 1) % ctx.world_size
    for n in LENGTHS:
        received = _sentinel(ctx, n, dtype)
        sending = dist.isend(_on_device(ctx, _pattern(ctx.rank, n, dtype, 30), dtype), after)
        receiving = dist.irecv(received, before)
        for work in (sending, receiving):
            if work is not None:
                work.wait()
        verify.compare(received, _pattern(before, n, dtype, 30), f"length {n} from rank {before}")
    return "exact at every length, each rank to the next"


def _object_for(rank: int) -> dict[str, Any]:
    return {"rank": rank, "text": "é∑" * (rank * 37 + 1), "values": [rank, rank / 3, None]}


def _all_gather_object(ctx: Context, dtype: str, verify: Verifier) -> str:
    import torch.distributed as dist

    gathered: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, _object_for(ctx.rank))
    for source, value in enumerate(gathered):
        if value != _object_for(source):
            verify.fail(f"the object from rank {source} arrived as {value!r:.80}")
    return "equal objects from every rank"


def _barrier(ctx: Context, dtype: str, verify: Verifier) -> str:
    import torch.distributed as dist

    dist.barrier()
    return "every rank passed it"
