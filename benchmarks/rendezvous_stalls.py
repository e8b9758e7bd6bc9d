"""The 5 s TCPStore stall: reproduce it, show its cause, and compare init-time tails.

Part 1, the mechanism, each a sequence of single operations over loopback, counting those
that take over 1 s:

- TCPStore client connections to one TCPStore server (``127.0.0.1``): some stall for 5 s;
- plain Python socket connections to the same server: none do;
- ``getnameinfo`` of the v4-mapped address ``::ffff:127.0.0.1`` without ``NI_NUMERICHOST``,
  which is what c10d does for every store connection (its clients connect over IPv6 with a
  v4-mapped address): ``/etc/hosts`` does not list that address, so the C library asks the
  DNS resolver for a PTR record, and where the answer is lost it retries after the resolver's
  5 s timeout; the same as the stalls above, at about the same rate;
- the same look-up with ``NI_NUMERICHOST``, and of plain ``127.0.0.1`` (listed in
  ``/etc/hosts``): no DNS query, no stall.

Part 2, what a job sees: >= 50 jobs of N ranks (16 by default), from launch until every rank
has initialised (see :mod:`benchmarks._ranks`), hand-written (``env://`` TCP store) vs
``accelbackends.spawn()`` (a ``FileStore``, no name look-ups), rotating order; p50, p95 and
max of each.

Goal: accelbackends faster (p50) and steadier (p95, max) than hand-written.

Usage: ``python -m benchmarks rendezvous-stalls [--probes 100] [--runs 50] [--ranks 16]``.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from . import _ranks
from ._common import (
    Goal,
    add_common_arguments,
    draw,
    ms,
    report,
    say,
    summary,
    table,
    write_results,
)

#: An operation over loopback that takes longer than this has stalled (normal: well under 1 ms).
PROBE_STALL = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, "rendezvous_stalls")
    parser.add_argument(
        "--probes", type=int, default=100, help="operations per mechanism probe (default 100)"
    )
    parser.add_argument("--runs", type=int, default=50, help="jobs per side (default 50)")
    parser.add_argument("--ranks", type=int, default=16, help="ranks per job (default 16)")


def _timed(operation: Callable[[int], Any], count: int) -> list[float]:
    seconds = []
    for index in range(count):
        start = time.perf_counter()
        operation(index)
        seconds.append(time.perf_counter() - start)
    return seconds


def mechanism(count: int) -> dict[str, list[float]]:
    """Part 1: per probe, the time of each of ``count`` operations."""
    import torch.distributed as dist

    timeout = timedelta(seconds=60)
    server = dist.TCPStore("127.0.0.1", 0, 1, True, timeout, wait_for_workers=False)
    port = server.port

    def store_client(index: int) -> None:
        client = dist.TCPStore("127.0.0.1", port, 1, False, timeout)
        client.set(f"probe/{index}", "1")  # a full round trip, so the server side counts too

    def plain_socket(_: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=60):
            pass

    mapped = ("::ffff:127.0.0.1", port, 0, 0)
    numeric = socket.NI_NUMERICHOST | socket.NI_NUMERICSERV
    probes: dict[str, Callable[[int], Any]] = {
        "TCPStore client connection (127.0.0.1)": store_client,
        "plain Python socket connection, same server": plain_socket,
        "getnameinfo(::ffff:127.0.0.1), as c10d does": lambda _: socket.getnameinfo(mapped, 0),
        "getnameinfo(::ffff:127.0.0.1, NI_NUMERICHOST)": lambda _: socket.getnameinfo(
            mapped, numeric
        ),
        "getnameinfo(127.0.0.1), listed in /etc/hosts": lambda _: socket.getnameinfo(
            ("127.0.0.1", port), 0
        ),
    }
    found = {}
    for name, operation in probes.items():
        found[name] = _timed(operation, count)
        stalls = sum(s > PROBE_STALL for s in found[name])
        say(f"  {name}: {stalls}/{count} over {PROBE_STALL:g} s")
    del server
    return found


def main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    probes, runs, ranks = args.probes, args.runs, args.ranks
    if args.quick:
        probes, runs, ranks = min(probes, 30), min(runs, 8), min(ranks, 8)
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    _ranks.prepare()
    say(f"rendezvous-stalls, part 1: {probes} operations per probe")
    probe_times = mechanism(probes)
    probe_rows = []
    for name, values in probe_times.items():
        slow = [s for s in values if s > PROBE_STALL]
        probe_rows.append(
            [
                name,
                f"{len(slow)}/{len(values)} ({len(slow) / len(values):.1%})",
                ", ".join(f"{s:.2f} s" for s in slow[:6]) or "-",
                ms(statistics.median(values)),
            ]
        )
    say(table(["operation", "stalled", "stall durations", "median"], probe_rows))

    sides = list(_ranks.RUNNERS)
    say(f"\nrendezvous-stalls, part 2: {runs} jobs of {ranks} ranks per side, {sides}")
    times: dict[str, list[float]] = {side: [] for side in sides}
    for index in range(runs):
        shift = index % len(sides)
        for side in sides[shift:] + sides[:shift]:
            times[side].append(_ranks.RUNNERS[side](ranks).init)
        if (index + 1) % 10 == 0:
            say(f"  {index + 1}/{runs} jobs per side done")
    quickest = min(min(v) for v in times.values())
    stats = {side: summary(values) for side, values in times.items()}
    stalls = {side: sum(_ranks.is_stall(v, quickest) for v in times[side]) for side in sides}
    say("")
    say(
        table(
            ["side", "p50", "p95", "max", "mean", f"stalled (>= {_ranks.STALL_SECONDS:g} s extra)"],
            [
                [
                    side,
                    ms(stats[side]["median"]),
                    ms(stats[side]["p95"]),
                    ms(stats[side]["max"]),
                    ms(stats[side]["mean"]),
                    f"{stalls[side]}/{runs}",
                ]
                for side in sides
            ],
        )
    )
    hand, ours = stats[_ranks.HANDWRITTEN], stats[_ranks.OURS]
    store_stalls = sum(s > PROBE_STALL for s in probe_times[next(iter(probe_times))])
    lookups = list(probe_times)[2]
    lookup_stalls = sum(s > PROBE_STALL for s in probe_times[lookups])
    goals = [
        Goal(
            "TCPStore stall reproduced",
            f"{store_stalls}/{probes} connections stalled; getnameinfo of the v4-mapped address "
            f"{lookup_stalls}/{probes}; numeric and /etc/hosts look-ups "
            f"{sum(s > PROBE_STALL for n in list(probe_times)[3:] for s in probe_times[n])}",
            "stalls seen; cause shown",
            None,
        ),
        Goal(
            f"init time p50, {ranks} ranks, {runs} jobs",
            f"{ms(ours['median'])} vs {ms(hand['median'])} hand-written",
            "faster than hand-written",
            ours["median"] < hand["median"],
        ),
        Goal(
            f"init time p95 / max, {ranks} ranks",
            f"{ms(ours['p95'])} / {ms(ours['max'])} vs {ms(hand['p95'])} / {ms(hand['max'])}",
            "steadier than hand-written",
            ours["p95"] < hand["p95"] and ours["max"] < hand["max"],
        ),
    ]
    chart = draw(
        "strip",
        {
            "title": f"Launch to every rank initialised: {runs} jobs of {ranks} Gloo ranks",
            "ylabel": "seconds",
            "groups": [
                {"label": side, "values": times[side], "highlight": side != _ranks.HANDWRITTEN}
                for side in sides
            ],
        },
        args.out.with_name("init_stalls.png"),
    )
    write_results(
        args.out,
        "rendezvous-stalls",
        goals,
        started,
        probes={
            name: {
                "stalled": sum(s > PROBE_STALL for s in values),
                "count": len(values),
                "stall_seconds": [s for s in values if s > PROBE_STALL],
                "seconds": summary(values),
            }
            for name, values in probe_times.items()
        },
        ranks=ranks,
        runs=runs,
        init_seconds=stats,
        stalled_jobs=stalls,
        job_runs=times,
        chart=str(chart) if chart else None,
    )
    report("rendezvous-stalls", goals, args.out)
    return 0
