"""Membership cost: the proof of membership vs the join it replaced, in the same ranks and run.

N processes are forked once; rank 0 hosts a TCP store and every rank joins one Gloo process
group. Then, round after round (a fresh key prefix each), every rank leaves a store barrier and
runs one side, the order alternating:

- ``join + barrier (before)``: what ``init()`` did before membership proofs: each rank adds
  itself to a counter, the last sets a completion key, the others wait for it; and, after
  ``init_process_group``, the store barrier that keeps ranks from leaving early.
- ``membership (after)``: what it does now: `accelbackends.rendezvous.membership.admit` with a
  secret (rank 0's nonce, each rank's HMAC proof, rank 0's check of every proof and its signed
  verdict) and `accelbackends.rendezvous.membership.verify_group`, the second proof over the process
  group, which is also the barrier.

A round's time is the slowest rank's. The figure is the median of the paired differences
(membership minus join only), 50 rounds after a warm-up.

Goal: <= 5 ms more than the join alone at 8 ranks.

Usage: ``python -m benchmarks membership [--ranks 2,8] [--rounds 50] [--quick]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
from datetime import timedelta
from typing import Any

from . import _ranks
from ._common import (
    Goal,
    add_common_arguments,
    rank_counts,
    report,
    say,
    summary,
    table,
    write_results,
)

JOIN, MEMBERSHIP = "join + barrier (before)", "membership (after)"
SIDES = (JOIN, MEMBERSHIP)
GOAL_SECONDS = 0.005
GOAL_RANKS = 8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, "membership")
    parser.add_argument("--ranks", type=rank_counts, default=[2, 8], help="default 2,8")
    parser.add_argument("--rounds", type=int, default=50, help="timed rounds (default 50)")


def _join_and_barrier(raw: Any, prefix: str, world_size: int) -> None:
    for count, done in (("joined", "complete"), ("connected", "all-connected")):
        if raw.add(prefix + count, 1) >= world_size:
            raw.set(prefix + done, "1")
        else:
            raw.wait([prefix + done], timedelta(seconds=60))


def _rank(rank: int, world_size: int, port: int, rounds: int, queue: Any) -> None:
    import torch.distributed as dist

    from accelbackends.rendezvous import membership

    raw = dist.TCPStore(
        "127.0.0.1", port, world_size, rank == 0, timedelta(seconds=60), wait_for_workers=False
    )
    dist.init_process_group(
        "gloo",
        store=dist.PrefixStore("pg/", raw),
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=60),
    )
    secret = membership.Secret(b"benchmark-secret-0123456789abcdef", "benchmark")
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for index in range(rounds + 1):
        order = SIDES if index % 2 == 0 else SIDES[::-1]
        for side in order:
            prefix = f"bench/{index}/{SIDES.index(side)}/"
            dist.barrier()
            started = time.perf_counter()
            if side == JOIN:
                _join_and_barrier(raw, prefix, world_size)
            else:
                admission = membership.admit(
                    raw,
                    prefix,
                    rank=rank,
                    world_size=world_size,
                    secret=secret,
                    deadline=time.monotonic() + 60,
                    join_timeout=60,
                    where="benchmark",
                )
                membership.verify_group(admission, rank, world_size, "cpu", 60)
            elapsed = time.perf_counter() - started
            if index:
                times[side].append(elapsed)
    dist.barrier()
    queue.put((rank, times))
    dist.destroy_process_group()


def _measure(world_size: int, rounds: int) -> dict[str, list[float]]:
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    port = _ranks.free_port()
    processes = [
        context.Process(target=_rank, args=(r, world_size, port, rounds, queue))
        for r in range(world_size)
    ]
    for process in processes:
        process.start()
    per_rank = [queue.get(timeout=600) for _ in processes]
    for process in processes:
        process.join(60)
    # A round lasts until its slowest rank is done.
    return {
        side: [max(times[side][i] for _, times in per_rank) for i in range(rounds)]
        for side in SIDES
    }


def main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    rounds = 10 if args.quick else args.rounds
    _ranks.prepare()
    say(f"membership: ranks {args.ranks}, 1 warm-up + {rounds} rounds of {list(SIDES)}")
    goals = []
    rows = []
    results: dict[int, Any] = {}
    for count in args.ranks:
        times = _measure(count, rounds)
        medians = {side: statistics.median(values) for side, values in times.items()}
        paired = statistics.median(
            m - j for m, j in zip(times[MEMBERSHIP], times[JOIN], strict=True)
        )
        for side in SIDES:
            rows.append([str(count), side, f"{medians[side] * 1e3:.2f} ms"])
        rows.append([str(count), "difference (paired median)", f"{paired * 1e3:+.2f} ms"])
        goals.append(
            Goal(
                f"membership cost at {count} ranks",
                f"{paired * 1e3:+.2f} ms ({medians[MEMBERSHIP] * 1e3:.2f} vs "
                f"{medians[JOIN] * 1e3:.2f} ms)",
                f"<= +{GOAL_SECONDS * 1e3:.0f} ms",
                paired <= GOAL_SECONDS if count == GOAL_RANKS else None,
                detail="median of paired differences, slowest rank per round; fastest rounds "
                f"{min(times[MEMBERSHIP]) * 1e3:.2f} vs {min(times[JOIN]) * 1e3:.2f} ms; "
                f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
            )
        )
        results[count] = {
            "rounds": rounds,
            "median": medians,
            "paired_difference_seconds": paired,
            "seconds": {side: summary(values) for side, values in times.items()},
        }
    say("")
    say(table(["ranks", "side", "median"], rows))
    write_results(args.out, "membership", goals, started, ranks=results)
    report("membership", goals, args.out)
    return 0
