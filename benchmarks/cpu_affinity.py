"""CPU affinity: CPU ranks doing compute + all_reduce, with and without exclusive cores.

``spawn()`` starts N CPU ranks (default 2, one per core of this machine) three ways, the order
rotating each round:

- ``unpinned``: accelbackends' default (``ACCELBACKENDS_CPU_AFFINITY`` off): each rank gets
  cores / local ranks intra-op threads and the kernel schedules them anywhere;
- ``exclusive``: ``cpu_affinity="exclusive"``: each rank pinned to cores of its own, with as
  many threads as it has cores;
- ``oversubscribed``: what a plain torch program does: no pinning, every rank as many threads
  as the machine has cores.

Each rank runs a training-like step: a matmul chain (compute) then an all_reduce of a gradient-
sized tensor (communication), timed on rank 0 after a barrier; the figure is the median step time
over the steps of a round, then the median over rounds. Reported, not judged: the effect depends
on how many cores there are and what else runs on them, and on 2 cores it is small.

Usage: ``python -m benchmarks cpu-affinity [--ranks 2] [--rounds 5] [--steps 30] [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from ._common import Goal, add_common_arguments, report, say, table, write_results

UNPINNED = "unpinned"
EXCLUSIVE = "exclusive"
OVERSUBSCRIBED = "oversubscribed"
SIDES = (UNPINNED, EXCLUSIVE, OVERSUBSCRIBED)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, "cpu_affinity")
    parser.add_argument("--ranks", type=int, default=2, help="CPU ranks (default 2)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per side (default 5)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per round")
    parser.add_argument("--size", type=int, default=256, help="matmul size (default 256)")
    parser.add_argument(
        "--grad-mib", type=float, default=4.0, help="all_reduce size in MiB (default 4)"
    )


def _steps(ctx: Any, steps: int, size: int, grad_elements: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    torch.manual_seed(ctx.rank)
    a = torch.randn(size, size)
    b = torch.randn(size, size)
    grad = torch.randn(grad_elements)
    times = []
    for step in range(steps + 3):  # three warm-up steps
        dist.barrier()
        start = time.perf_counter()
        x = a
        for _ in range(8):
            x = torch.tanh(x @ b)
        grad.add_(x.mean())
        dist.all_reduce(grad)
        grad.div_(ctx.world_size)
        if step >= 3:
            times.append(time.perf_counter() - start)
    return {
        "median": statistics.median(times),
        "threads": torch.get_num_threads(),
        "cpus": sorted(os.sched_getaffinity(0)),
    }


def _run(side: str, ranks: int, steps: int, size: int, grad_elements: int) -> dict[str, Any]:
    import accelbackends

    options: dict[str, Any] = {"accelerator": "cpu"}
    if side == EXCLUSIVE:
        options["cpu_affinity"] = "exclusive"
    elif side == OVERSUBSCRIBED:
        options["threads"] = len(os.sched_getaffinity(0))
    results = accelbackends.spawn(_steps, ranks, args=(steps, size, grad_elements), **options)
    return {
        "median": results[0]["median"],
        "threads": [r["threads"] for r in results],
        "cpus": [r["cpus"] for r in results],
    }


def main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    rounds, steps = (2, 5) if args.quick else (args.rounds, args.steps)
    cores = len(os.sched_getaffinity(0))
    grad_elements = int(args.grad_mib * 2**20 / 4)
    say(
        f"cpu-affinity: {args.ranks} CPU ranks on {cores} allowed cores, {rounds} rounds x "
        f"{steps} steps of 8 matmuls {args.size}x{args.size} + all_reduce {args.grad_mib:g} MiB"
    )
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for round_index in range(rounds):
        shift = round_index % len(SIDES)
        for side in SIDES[shift:] + SIDES[:shift]:
            runs[side].append(_run(side, args.ranks, steps, args.size, grad_elements))
    medians = {side: statistics.median(r["median"] for r in runs[side]) for side in SIDES}
    rows = [
        [
            side,
            f"{medians[side] * 1e3:.2f} ms",
            f"{medians[side] / medians[UNPINNED]:.3f}",
            ",".join(map(str, runs[side][0]["threads"])),
            " | ".join(",".join(map(str, c)) for c in runs[side][0]["cpus"]),
        ]
        for side in SIDES
    ]
    say("")
    say(table(["side", "median step", "vs unpinned", "threads", "cpus per rank"], rows))
    ratio = medians[EXCLUSIVE] / medians[UNPINNED]
    goals = [
        Goal(
            f"step time with exclusive cores, {args.ranks} CPU ranks on {cores} cores",
            f"{ratio:.3f} x unpinned ({medians[EXCLUSIVE] * 1e3:.2f} vs "
            f"{medians[UNPINNED] * 1e3:.2f} ms)",
            "reported",
            None,
            detail=f"oversubscribed (plain torch threads): "
            f"{medians[OVERSUBSCRIBED] / medians[UNPINNED]:.3f} x unpinned",
        )
    ]
    write_results(
        args.out,
        "cpu-affinity",
        goals,
        started,
        ranks=args.ranks,
        rounds=rounds,
        steps=steps,
        median_seconds=medians,
        runs=runs,
    )
    report("cpu-affinity", goals, args.out)
    return 0
