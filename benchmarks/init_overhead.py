"""init() overhead: accelbackends.init() vs a hand-written init_process_group, same processes.

N processes are forked once (plain ``env://`` variables: RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1) and then, round after round, every rank initialises
and tears down a Gloo process group each way, the order rotating each round, with a barrier
before each start and before each teardown. A fresh free port per attempt keeps the attempts
apart. One attempt's time is from the first rank leaving the barrier until the last rank has
returned from its call. The sides:

- ``hand-written``: ``init_process_group("gloo", rank=rank, world_size=n)``; rank 0 hosts the
  TCP store on MASTER_PORT.
- ``init() env://, cold``: ``accelbackends.init()`` after ``accelbackends.reset()``, so the call
  loads the plugins and detects, as the first call of a program does; the same TCP store.
- ``init() env://, warm``: the same with the plugins loaded and detection cached.
- ``init() file store, cold``: ``init()`` as the ranks of ``spawn()`` run it, through a
  ``FileStore`` in a private directory (Gloo on loopback).

The first round is a warm-up; the figures are medians of 20 rounds. The TCP sides are exposed
to the 5 s store stall (see ``rendezvous-stalls``); medians resist it, and the figures without
the rounds where any side stalled are shown too.

Goal (cold env:// side, the one a program pays): <= 5 % or <= 20 ms more than hand-written,
whichever is larger, at 2, 4 and 8 ranks.

The times of the TCP sides are two-humped: a rank that tries to connect before rank 0's store
listens is held back by the store client's connect back-off (about 0.4-0.6 s); the table counts
the rounds each side lost to it.

Usage: ``python -m benchmarks init-overhead [--ranks 2,4,8] [--rounds 20] [--quick]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

from . import _ranks
from ._common import (
    Goal,
    add_common_arguments,
    ms,
    rank_counts,
    report,
    say,
    summary,
    table,
    write_results,
)

HAND = "hand-written"
COLD = "init() env://, cold"
WARM = "init() env://, warm"
LOCAL = "init() file store, cold"
SIDES = (HAND, COLD, WARM, LOCAL)
_TCP = (HAND, COLD, WARM)
GOAL_FRACTION, GOAL_SECONDS = 0.05, 0.020
#: A TCP store client that connects before the store listens retries after a back-off of about
#: 0.4-0.6 s (torch 2.13); a round this slow, short of a stall, is counted as hit by it.
BACKOFF_SECONDS = 0.3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, "init_overhead")
    parser.add_argument("--ranks", type=rank_counts, default=[2, 4, 8], help="default 2,4,8")
    parser.add_argument(
        "--rounds", type=int, default=20, help="timed rounds per rank count (default 20)"
    )


def _rank(
    rank: int,
    world_size: int,
    plan: list[list[tuple[str, int]]],
    barrier: Any,
    queue: Any,
    store_file: str,
) -> None:
    import torch.distributed as dist

    import accelbackends
    from accelbackends import ClusterInfo

    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
    )
    for round_index, steps in enumerate(plan):
        for side, port in steps:
            os.environ["MASTER_PORT"] = str(port)
            if side == LOCAL:
                os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # as spawn() sets it
            else:
                os.environ.pop("GLOO_SOCKET_IFNAME", None)
            if side in (COLD, LOCAL):
                accelbackends.reset()
            elif side == WARM:
                accelbackends.select()  # loaded and cached before the clock starts
            barrier.wait()
            start = time.monotonic()
            if side == HAND:
                dist.init_process_group("gloo", rank=rank, world_size=world_size)
            elif side == LOCAL:
                cluster = ClusterInfo(
                    launcher="spawn",
                    rank=rank,
                    world_size=world_size,
                    local_rank=rank,
                    local_world_size=world_size,
                    store_socket=store_file,
                    run_id=f"overhead-{round_index}",
                )
                accelbackends.init(cluster=cluster)
            else:
                accelbackends.init()
            end = time.monotonic()
            barrier.wait()  # nobody tears down while a peer may still be connecting
            if side == HAND:
                dist.destroy_process_group()
            else:
                accelbackends.destroy()
            queue.put((round_index, side, rank, start, end))


def _measure(world_size: int, rounds: int) -> dict[str, list[float]]:
    """Per side, one time per timed round (the warm-up round dropped)."""
    plan = []
    for round_index in range(rounds + 1):
        shift = round_index % len(SIDES)
        order = SIDES[shift:] + SIDES[:shift]
        plan.append([(side, _ranks.free_port() if side in _TCP else 0) for side in order])
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(world_size, timeout=300)
    queue = context.SimpleQueue()
    workdir = tempfile.mkdtemp(prefix="accelbackends-overhead-")
    store_file = os.path.join(workdir, "store")
    processes = [
        context.Process(target=_rank, args=(r, world_size, plan, barrier, queue, store_file))
        for r in range(world_size)
    ]
    try:
        for process in processes:
            process.start()
        for process in processes:
            process.join(1800)
        failed = [p.exitcode for p in processes if p.exitcode != 0]
        if failed:
            raise RuntimeError(f"{len(failed)} of {world_size} ranks failed: {failed}")
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    stamps: dict[tuple[int, str], list[tuple[float, float]]] = {}
    while not queue.empty():
        round_index, side, _rank_index, start, end = queue.get()
        stamps.setdefault((round_index, side), []).append((start, end))
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for round_index in range(1, rounds + 1):
        for side in SIDES:
            pairs = stamps[(round_index, side)]
            times[side].append(max(e for _, e in pairs) - min(s for s, _ in pairs))
    return times


def _allowed(hand: float) -> float:
    return max(GOAL_FRACTION * hand, GOAL_SECONDS)


def main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    counts = args.ranks
    rounds = 4 if args.quick else args.rounds
    _ranks.prepare()
    say(f"init-overhead: ranks {counts}, 1 warm-up + {rounds} rounds of {list(SIDES)}")
    results: dict[int, dict[str, Any]] = {}
    goals = []
    rows = []
    for count in counts:
        times = _measure(count, rounds)
        quickest = min(min(values) for values in times.values())
        clean = [
            i
            for i in range(rounds)
            if not any(_ranks.is_stall(times[side][i], quickest) for side in SIDES)
        ]
        medians = {side: statistics.median(values) for side, values in times.items()}
        clean_medians = {
            side: statistics.median([times[side][i] for i in clean]) if clean else float("nan")
            for side in SIDES
        }
        stalls = {
            side: sum(_ranks.is_stall(v, quickest) for v in values)
            for side, values in times.items()
        }
        backoffs = {
            side: sum(v >= BACKOFF_SECONDS and not _ranks.is_stall(v, quickest) for v in values)
            for side, values in times.items()
        }
        overhead = medians[COLD] - medians[HAND]
        paired = statistics.median(c - h for c, h in zip(times[COLD], times[HAND], strict=True))
        allowed = _allowed(medians[HAND])
        for side in SIDES:
            extra = medians[side] - medians[HAND]
            rows.append(
                [
                    str(count),
                    side,
                    ms(medians[side]),
                    "" if side == HAND else f"{extra * 1e3:+.1f} ms ({extra / medians[HAND]:+.0%})",
                    ms(clean_medians[side]),
                    f"{backoffs[side]}/{rounds}",
                    f"{stalls[side]}/{rounds}",
                ]
            )
        say(f"  {count} ranks done: cold init() {overhead * 1e3:+.1f} ms vs hand-written")
        goals.append(
            Goal(
                f"init() overhead at {count} ranks",
                f"{overhead * 1e3:+.1f} ms ({overhead / medians[HAND]:+.0%}; "
                f"{ms(medians[COLD])} vs {ms(medians[HAND])})",
                f"<= +{allowed * 1e3:.0f} ms",
                overhead <= allowed,
                detail=f"median of paired differences {paired * 1e3:+.1f} ms; rounds hit by "
                f"the connect back-off: {backoffs[COLD]}/{rounds} vs {backoffs[HAND]}/{rounds}; "
                f"warm {medians[WARM] - medians[HAND]:+.3f} s; "
                f"file store {medians[LOCAL] - medians[HAND]:+.3f} s",
            )
        )
        results[count] = {
            "rounds": rounds,
            "stall_free_rounds": len(clean),
            "stalls": stalls,
            "backoff_rounds": backoffs,
            "median": medians,
            "median_stall_free": clean_medians,
            "overhead_seconds": overhead,
            "paired_difference_seconds": paired,
            "allowed_seconds": allowed,
            "seconds": {side: summary(values) for side, values in times.items()},
            "runs": times,
        }
    say("")
    say(
        table(
            [
                "ranks",
                "side",
                "median",
                "vs hand-written",
                "median, no stall",
                f"back-off ({BACKOFF_SECONDS:g}-3 s)",
                "stalls (>3 s)",
            ],
            rows,
        )
    )
    write_results(args.out, "init-overhead", goals, started, ranks=results)
    report("init-overhead", goals, args.out)
    return 0
