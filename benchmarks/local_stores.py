"""Single-host rendezvous stores: the ``FileStore`` that ``spawn()`` uses against loopback TCP.

``spawn()`` meets its ranks through torch's ``FileStore`` in a private directory. It used to
serve them through a store of accelbackends' own (pickle over a Unix socket, served by the
parent's threads); this benchmark found ``FileStore`` as fast and as free of stalls, and that
store was retired (its figures stay in the docs' performance page). torch offers, for ranks on
one host:

- ``FileStore``: a file in a private directory; no socket, no name look-up (what ``spawn()``
  uses, with ``world_size=-1`` so that the file outlives ranks that leave);
- ``TCPStore`` on loopback (libuv server, torch 2.13's default), hosted by the parent on a
  socket bound to 127.0.0.1, as ``host_loopback_store`` does;
- (``HashStore`` lives in one process and cannot serve forked ranks.)

Part 1, the stall: ``--connections`` clients in turn connect to each store (hosted here) and
set and read one key; a connection that takes over 1 s has stalled (normal: about a
millisecond). Only TCPStore makes the reverse name look-ups that stall.

Part 2, start time: for each rank count, rounds run every store once in rotating order: the
parent creates the store, forks N ranks (torch already imported, so the fork measures the store
and Gloo, not imports), each connects and runs ``init_process_group("gloo")`` on it and one
checked all_reduce. A job's time is from before the store is created until every rank has
initialised; a job more than 3 s slower than the quickest of its store and size met a stall
(the lost-DNS-answer stall is 5 s; see ``rendezvous-stalls``).

Goal: FileStore never stalls and is no slower than loopback TCP; report.

Usage: ``python -m benchmarks local-stores [--ranks 2,4,8,16,32] [--repeats 5]
[--connections 200] [--quick]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
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

STORES = ("FileStore", "TCPStore-loopback")
REFERENCE = "FileStore"
#: Every store operation and the job as a whole give up after this long (a hang guard).
TIMEOUT = timedelta(seconds=120)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, "local_stores")
    parser.add_argument(
        "--ranks", type=rank_counts, default=[2, 4, 8, 16, 32], help="default 2,4,8,16,32"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds per count (5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    parser.add_argument(
        "--connections", type=int, default=200, help="client connections per store (200)"
    )


def _client(kind: str, where: Any, world_size: int) -> Any:
    import torch.distributed as dist

    if kind == "FileStore":
        return dist.FileStore(where, -1)  # as spawn() opens it
    return dist.TCPStore("127.0.0.1", where, world_size, False, TIMEOUT)


def _rank(kind: str, where: Any, rank: int, world_size: int, queue: Any) -> None:
    import torch
    import torch.distributed as dist

    store = _client(kind, where, world_size)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=TIMEOUT)
    initialised = time.monotonic()
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    if tensor.item() != world_size:
        raise RuntimeError(f"all_reduce gave {tensor.item()}, expected {world_size}")
    dist.destroy_process_group()
    queue.put((rank, initialised))


def _job(kind: str, world_size: int) -> float:
    """Seconds from creating the store until every rank had initialised."""
    from accelbackends.rendezvous.store import host_loopback_store

    context = multiprocessing.get_context("fork")
    queue = context.SimpleQueue()
    workdir = tempfile.mkdtemp(prefix="bench-stores-")
    launch = time.monotonic()
    server: Any = None
    where: Any
    if kind == "FileStore":
        where = os.path.join(workdir, "store")
    else:
        server, where = host_loopback_store(world_size, TIMEOUT.total_seconds())
    processes = [
        context.Process(target=_rank, args=(kind, where, rank, world_size, queue))
        for rank in range(world_size)
    ]
    try:
        for process in processes:
            process.start()
        stamps = [queue.get() for _ in range(world_size)]
        for process in processes:
            process.join(TIMEOUT.total_seconds())
            if process.exitcode != 0:
                raise RuntimeError(f"{kind}: a rank exited with {process.exitcode}")
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
        del server  # the TCP store serves until here
        shutil.rmtree(workdir, ignore_errors=True)
    return max(initialised for _, initialised in stamps) - launch


def _connections(kind: str, count: int) -> list[float]:
    """Seconds each of ``count`` clients took to connect, set and read one key."""
    from accelbackends.rendezvous.store import host_loopback_store

    workdir = tempfile.mkdtemp(prefix="bench-stores-")
    server: Any = None
    try:
        if kind == "FileStore":
            where: Any = os.path.join(workdir, "store")
        else:
            server, where = host_loopback_store(1 + count, TIMEOUT.total_seconds())
        seconds = []
        for index in range(count):
            began = time.monotonic()
            client = _client(kind, where, 1 + count)
            client.set(f"key{index}", "value")
            client.get(f"key{index}")
            seconds.append(time.monotonic() - began)
            del client
        return seconds
    finally:
        del server
        shutil.rmtree(workdir, ignore_errors=True)


RUNNERS: dict[str, Callable[[int], float]] = {
    kind: (lambda count, kind=kind: _job(kind, count))  # type: ignore[misc]
    for kind in STORES
}


def main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    counts, repeats, warmup = args.ranks, args.repeats, args.warmup
    if args.quick:
        counts, repeats, warmup = [c for c in counts if c in (2, 8, 32)] or counts, 2, 0
    _ranks.prepare()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # as spawn() keeps Gloo on loopback
    connections = {kind: _connections(kind, args.connections) for kind in STORES}
    say(f"local-stores: {args.connections} client connections to each store, one at a time")
    say(
        table(
            ["store", "median", "max", "over 1 s"],
            [
                [kind, ms(statistics.median(v)), ms(max(v)), str(sum(x > 1.0 for x in v))]
                for kind, v in connections.items()
            ],
        )
    )
    timings: dict[int, dict[str, list[float]]] = {}
    say(f"local-stores: ranks {counts}, {warmup} warm-up + {repeats} rounds of {list(STORES)}")
    for count in counts:
        timings[count] = {kind: [] for kind in STORES}
        for round_index in range(warmup + repeats):
            shift = round_index % len(STORES)
            for kind in STORES[shift:] + STORES[:shift]:
                seconds = RUNNERS[kind](count)
                if round_index >= warmup:
                    timings[count][kind].append(seconds)
        say(
            f"  {count:>2} ranks: "
            + ", ".join(f"{k} {ms(statistics.median(v))}" for k, v in timings[count].items())
        )

    def stalls(values: list[float]) -> int:
        return sum(value > min(values) + _ranks.STALL_SECONDS for value in values)

    rows = []
    for count in counts:
        row = [str(count)]
        reference = statistics.median(timings[count][REFERENCE])
        for kind in STORES:
            values = timings[count][kind]
            median = statistics.median(values)
            row.append(
                f"{ms(median)} (max {ms(max(values))}, {stalls(values)} stalled)"
                + ("" if kind == REFERENCE else f" {median / reference:.2f}x")
            )
        rows.append(row)
    say("")
    say("median time from creating the store until every rank initialised (x: vs FileStore)")
    say(table(["ranks", *STORES], rows))

    top = max(counts)
    medians = {kind: statistics.median(timings[top][kind]) for kind in STORES}
    stalled = {kind: sum(stalls(timings[c][kind]) for c in counts) for kind in STORES}
    runs = sum(len(timings[c][REFERENCE]) for c in counts)
    goals = [
        Goal(
            "store connections that stalled (over 1 s)",
            ", ".join(f"{k} {sum(x > 1.0 for x in v)}/{len(v)}" for k, v in connections.items()),
            "FileStore never stalls; report TCPStore",
            None,
        ),
        Goal(
            f"{top} ranks on one host: FileStore (spawn()'s store) vs loopback TCPStore",
            ", ".join(f"{kind} {ms(medians[kind])}" for kind in STORES),
            "FileStore no slower; report",
            None,
            detail="jobs with a stall out of "
            f"{runs} each: " + ", ".join(f"{kind} {stalled[kind]}" for kind in STORES),
        ),
    ]
    write_results(
        args.out,
        "local-stores",
        goals,
        started,
        repeats=repeats,
        warmup=warmup,
        connections={kind: summary(values) for kind, values in connections.items()},
        ranks={
            str(count): {
                kind: {"init": summary(values), "runs": values, "stalled": stalls(values)}
                for kind, values in timings[count].items()
            }
            for count in counts
        },
    )
    report("local-stores", goals, args.out)
    return 0
