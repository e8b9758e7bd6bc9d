"""The busbw that ``accelbackends check`` reports vs a hand-written loop's, size by size, with
the hand-written loop against itself as the measure of the method's own noise.

Every round runs three sides in the same spawned ranks, in rotating order so that machine drift
hits all three: check's loop, the hand-written loop, and the hand-written loop again. Each round
gives two ratios, busbw(check) / busbw(plain) and busbw(plain again) / busbw(plain); the medians
per size are reported side by side. The second is 1 for a perfect method; where it is further
than 2 % from 1 at a judged size, more rounds are run (up to 4x ``--repeats``) until it is
within 2 %. Goal: check/plain >= 0.95 at every size >= 1 MiB. Smaller sizes are reported but
not judged: Gloo on a small CPU machine jitters by tens of percent there.

Usage: ``python -m benchmarks check-overhead [--nproc 2] [--repeats 15] [--out FILE.json]``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from accelbackends.cli.check import MIB, format_size, measure, parse_size

GOAL = 0.95
#: The sides of every round: check's loop, the hand-written loop, and the hand-written loop
#: again, whose ratio to the first is the method's own noise.
SIDES = ("check", "plain", "plain again")
#: More rounds are run (up to MAX_ROUNDS_FACTOR x --repeats) while the hand-written loop
#: against itself is further than this from 1 at a judged size.
NOISE_TARGET = 0.02
MAX_ROUNDS_FACTOR = 4
MIN_ITERS, MAX_ITERS = 5, 2000
JUDGED_FROM = 1 * MIB
DEFAULT_OUT = Path(__file__).parent / "results" / "check_overhead.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nproc", type=int, default=2, help="ranks to spawn (default 2)")
    parser.add_argument("--min-bytes", type=parse_size, default=1024, help="default 1KiB")
    parser.add_argument("--max-bytes", type=parse_size, default=64 * MIB, help="default 64MiB")
    parser.add_argument(
        "--repeats", type=int, default=15, help="measurements of each side per size (default 15)"
    )
    parser.add_argument(
        "--warmup", type=int, default=1, help="warm-up calls before each measurement (default 1)"
    )
    parser.add_argument(
        "--sample-seconds",
        type=float,
        default=0.1,
        help="timed work per measurement (default 0.1 s; at least 5 calls): short samples "
        "in many pairs let the median ignore bursts of load from other processes",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="where to write the JSON results (default benchmarks/results/check_overhead.json)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 when a judged size misses the goal"
    )


def _plain(ctx: Any, nbytes: int, iters: int, warmup: int) -> float:
    """The reference: the loop anyone would write by hand; returns busbw in bytes/s."""
    import torch
    import torch.distributed as dist

    tensor = torch.zeros(nbytes // 4, dtype=torch.float32, device=ctx.device)
    for _ in range(warmup):
        dist.all_reduce(tensor)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    if ctx.device.type != "cpu":
        torch.accelerator.synchronize()
    mean = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
    dist.all_reduce(mean, op=dist.ReduceOp.MAX)
    n = ctx.world_size
    return (tensor.numel() * 4 / mean.item()) * 2 * (n - 1) / n


def _rank(
    ctx: Any, sizes: list[int], repeats: int, warmup: int, sample_seconds: float
) -> list[dict[str, Any]]:
    rows = []
    for nbytes in sizes:
        # One calibration (the same on every rank: measure() returns the slowest rank's time),
        # then every side runs the same count of calls.
        calibration = measure(ctx, "all_reduce", nbytes, warmup=warmup)
        wanted = math.ceil(sample_seconds / max(calibration.seconds, 1e-9))
        iters = min(MAX_ITERS, max(MIN_ITERS, wanted))
        busbw: dict[str, list[float]] = {side: [] for side in SIDES}
        rounds = 0
        # Every value below is the same on every rank (the slowest rank's time), so every rank
        # takes the same decision to stop.
        while rounds < repeats or (
            rounds < repeats * MAX_ROUNDS_FACTOR and not _settled(busbw, nbytes)
        ):
            shift = rounds % len(SIDES)
            for side in SIDES[shift:] + SIDES[:shift]:
                if side == "check":
                    m = measure(ctx, "all_reduce", nbytes, iters=iters, warmup=warmup)
                    busbw[side].append(m.busbw)
                else:
                    busbw[side].append(_plain(ctx, nbytes, iters, warmup))
            rounds += 1
        row = _summarise(
            {
                "bytes": nbytes,
                "iters": iters,
                "rounds": rounds,
                "check_busbw": busbw["check"],
                "plain_busbw": busbw["plain"],
                "plain_again_busbw": busbw["plain again"],
            }
        )
        if ctx.rank == 0:
            print(_row_text(row), flush=True)  # a line per size while it runs
        rows.append(row)
    return rows


def _ratio(top: list[float], bottom: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(top, bottom, strict=True))


def _settled(busbw: dict[str, list[float]], nbytes: int) -> bool:
    """Enough rounds: the loop against itself agrees within NOISE_TARGET (sizes not judged
    need no more than the first rounds)."""
    if nbytes < JUDGED_FROM:
        return True
    return abs(_ratio(busbw["plain again"], busbw["plain"]) - 1) <= NOISE_TARGET


def _summarise(row: dict[str, Any]) -> dict[str, Any]:
    ratios = [a / b for a, b in zip(row["check_busbw"], row["plain_busbw"], strict=True)]
    itself = _ratio(row["plain_again_busbw"], row["plain_busbw"])
    judged = row["bytes"] >= JUDGED_FROM
    return {
        **row,
        "ratios": ratios,
        "median_ratio": statistics.median(ratios),
        "self_ratio": itself,
        "noise": abs(itself - 1),
        "judged": judged,
    }


_TABLE = "{:>9} {:>6} {:>6} {:>14} {:>14} {:>13} {:>15}  {}"


def _row_text(row: dict[str, Any]) -> str:
    met = row["median_ratio"] >= GOAL
    return _TABLE.format(
        format_size(row["bytes"]),
        row["iters"],
        row["rounds"],
        f"{statistics.median(row['check_busbw']) / 1e9:.3f}",
        f"{statistics.median(row['plain_busbw']) / 1e9:.3f}",
        f"{row['median_ratio']:.3f}",
        f"{row['self_ratio']:.3f}",
        ("met" if met else "MISSED") if row["judged"] else "not judged",
    )


def main(args: argparse.Namespace) -> int:
    from accelbackends import spawn

    sizes, size = [], args.min_bytes
    while size <= args.max_bytes:
        sizes.append(size)
        size *= 2
    print(
        f"check-overhead: all_reduce float32, {args.nproc} ranks, {format_size(sizes[0])} to "
        f"{format_size(sizes[-1])}, {args.repeats} rounds of three sides per size (more where "
        "the hand-written loop disagrees with itself)",
        flush=True,
    )
    print(
        _TABLE.format(
            "size",
            "iters",
            "rounds",
            "check (GB/s)",
            "plain (GB/s)",
            "check/plain",
            "plain/plain",
            "goal",
        )
    )
    sys.stdout.flush()  # the ranks are forked
    started = time.time()
    rows = spawn(_rank, args.nproc, args=(sizes, args.repeats, args.warmup, args.sample_seconds))[0]
    missed = [format_size(r["bytes"]) for r in rows if r["judged"] and r["median_ratio"] < GOAL]
    pooled = [r for row in rows if row["judged"] for r in row["ratios"]]
    overall = statistics.median(pooled) if pooled else None
    judged = [row for row in rows if row["judged"]]
    worst = min(judged, key=lambda row: row["median_ratio"]) if judged else None
    noise = max(row["noise"] for row in judged) if judged else None
    if overall is not None and worst is not None:
        print(
            f"all sizes >= 1 MiB together: median ratio {overall:.3f} over {len(pooled)} pairs; "
            f"lowest {worst['median_ratio']:.3f} at {format_size(worst['bytes'])}; the "
            f"hand-written loop against itself: at most {noise:.1%} from 1"
        )
    result = {
        "benchmark": "check-overhead",
        "goal": f"median busbw ratio check/plain >= {GOAL} at every size >= 1 MiB",
        "goal_met": None if overall is None else not missed,
        "median_ratio_from_1_mib": overall,
        "lowest_ratio_from_1_mib": worst["median_ratio"] if worst else None,
        "lowest_ratio_size": worst["bytes"] if worst else None,
        "largest_self_noise_from_1_mib": noise,
        "ranks": args.nproc,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "sample_seconds": args.sample_seconds,
        "seconds": round(time.time() - started, 1),
        "python": platform.python_version(),
        "torch": _torch_version(),
        "sizes": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    if overall is None:
        summary = "nothing judged (no size >= 1 MiB)"
    else:
        summary = "goal met" if not missed else f"goal missed at {', '.join(missed)}"
    print(f"{summary} (>= {GOAL} at every size >= 1 MiB); results written to {args.out}")
    return 1 if missed and args.strict else 0


def _torch_version() -> str:
    import torch

    return str(torch.__version__)
