"""The rendezvous beyond this machine's ranks, simulated: 64 to 1024 ranks against one store.

What is simulated: each rank is a thread (spread over a few forked processes, so that the client
side is not one interpreter's GIL) that runs exactly what ``init()`` runs before and after
``init_process_group``: it connects to the store and joins
(`accelbackends.rendezvous.store.meet`: count in, wait until all N have), and after the process
group it waits at the all-connected barrier (the store barrier ``init()`` ends with). Two stores:

- ``tcp``: torch's TCP store, hosted by the parent as a launcher's agent hosts it (every rank a
  client, ``MASTER_ADDR=127.0.0.1``): what jobs started by torchrun, SLURM, MPI or plain
  ``env://`` meet through;
- ``file``: the single-host store `accelbackends.spawn` uses (torch's `FileStore` in a private
  directory; until this round a Unix-socket store served from the parent).

What is not: no Gloo (no process group, no tensors, no N x N connections), no accelerator, no
plugin loading or detection (the ranks share one process's loaded registry), no network between
hosts (loopback), and N ranks share 2 cores, so the figure is an upper bound on the store's
part of a real job's start: the time from all ranks starting to connect until the last one has
passed the barrier, against N.

Each TCP connection makes both ends ask DNS for the loopback address's name (see
``rendezvous-stalls``), and the TCP store's server does it for one client after the other, so
the TCP side runs only up to 256 ranks by default (``--tcp-ranks``).

Usage: ``python -m benchmarks rendezvous-sim [--ranks 64,256,1024] [--repeats 3] [--quick]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import shutil
import statistics
import tempfile
import threading
import time
from datetime import timedelta
from typing import Any

from ._common import (
    Goal,
    add_common_arguments,
    draw,
    ms,
    rank_counts,
    report,
    say,
    summary,
    table,
    write_results,
)

STORES = ("tcp", "file")
#: Forked processes the simulated ranks are spread over.
PROCESSES = 4
JOIN_TIMEOUT = 300.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, "rendezvous_sim")
    parser.add_argument(
        "--ranks", type=rank_counts, default=[64, 256, 1024], help="default 64,256,1024"
    )
    parser.add_argument(
        "--tcp-ranks",
        type=rank_counts,
        default=[64, 256],
        help="the counts also run against the TCP store (default 64,256: its server resolves "
        "every client's name in turn, about 20-90 ms each here, so 1024 would take minutes)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per store and count (3)")


def _worker(
    store: str,
    ranks: list[int],
    world_size: int,
    where: dict[str, Any],
    ready: Any,
    go: Any,
    done: Any,
) -> None:
    from accelbackends.job.lifecycle import _wait_until_every_rank_is_connected
    from accelbackends.plugin.types import ClusterInfo
    from accelbackends.rendezvous.store import meet

    finished: list[float] = []
    failures: list[str] = []

    def simulated_rank(rank: int) -> None:
        cluster = ClusterInfo(
            launcher="simulation",
            rank=rank,
            world_size=world_size,
            local_rank=0,
            local_world_size=1,
            master_addr=where.get("addr"),
            master_port=where.get("port"),
            store_socket=where.get("socket"),
            store_hosted=store == "tcp",
            run_id=where["run_id"],
        )
        go.wait()
        try:
            rendezvous = meet(cluster, join_timeout=JOIN_TIMEOUT, generation=1)
            _wait_until_every_rank_is_connected(cluster, rendezvous, JOIN_TIMEOUT)
        except Exception as exc:  # reported to the parent, which fails the run
            failures.append(f"rank {rank}: {exc}")
            return
        finished.append(time.monotonic())

    threading.stack_size(256 * 1024)
    threads = [threading.Thread(target=simulated_rank, args=(r,), daemon=True) for r in ranks]
    for thread in threads:
        thread.start()
    ready.put(os.getpid())
    for thread in threads:
        thread.join()
    done.put((finished, failures))


def simulate(store: str, world_size: int) -> float:
    """One rendezvous of ``world_size`` simulated ranks: seconds from the start signal until
    the last rank has passed the all-connected barrier."""
    import torch.distributed as dist

    workdir = tempfile.mkdtemp(prefix="accelbackends-sim-")
    where: dict[str, Any] = {"run_id": f"sim-{store}-{world_size}-{time.monotonic_ns()}"}
    server: Any
    if store == "tcp":
        server = dist.TCPStore(
            "127.0.0.1",
            0,
            world_size,
            True,
            timedelta(seconds=JOIN_TIMEOUT),
            wait_for_workers=False,
        )
        where.update(addr="127.0.0.1", port=server.port)
    else:
        server = None  # torch's FileStore: the ranks open the file themselves
        where["socket"] = os.path.join(workdir, "store")
    context = multiprocessing.get_context("fork")
    ready, done, go = context.SimpleQueue(), context.SimpleQueue(), context.Event()
    shares = [list(range(i, world_size, PROCESSES)) for i in range(PROCESSES)]
    processes = [
        context.Process(target=_worker, args=(store, share, world_size, where, ready, go, done))
        for share in shares
        if share
    ]
    try:
        for process in processes:
            process.start()
        for _ in processes:
            ready.get()
        started = time.monotonic()
        go.set()
        results = [done.get() for _ in processes]
        for process in processes:
            process.join(60)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
        del server
        shutil.rmtree(workdir, ignore_errors=True)
    failures = [failure for _, found in results for failure in found]
    if failures:
        raise RuntimeError(f"{len(failures)} simulated ranks failed, first: {failures[0]}")
    return max(stamp for finished, _ in results for stamp in finished) - started


def main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    counts, repeats = args.ranks, args.repeats
    if args.quick:
        counts, repeats = [c for c in counts if c <= 256] or counts, 1
    plan = {"file": counts, "tcp": [c for c in counts if c in args.tcp_ranks]}
    if args.quick:
        plan["tcp"] = plan["tcp"][:1]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4 * max(counts) + 256  # the store's and the clients' sockets, with room
    if soft < wanted and (hard == resource.RLIM_INFINITY or wanted <= hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    say(f"rendezvous-sim: ranks {plan}, {repeats} run(s) each")
    times: dict[str, dict[int, list[float]]] = {s: {c: [] for c in plan[s]} for s in STORES}
    for count in counts:
        stores = [s for s in STORES if count in plan[s]]
        for index in range(repeats):
            for store in stores if index % 2 == 0 else stores[::-1]:
                times[store][count].append(simulate(store, count))
        say(
            f"  {count:>5} ranks: "
            + ", ".join(f"{s} {ms(statistics.median(times[s][count]))}" for s in stores)
        )
    rows = []
    for count in counts:
        row = [str(count)]
        for store in STORES:
            values = times[store].get(count)
            if not values:
                row += ["not run", ""]
                continue
            median = statistics.median(values)
            row.append(f"{ms(median)} (max {ms(max(values))})")
            row.append(f"{median / count * 1e3:.2f} ms")
        rows.append(row)
    say("")
    say("time from the start until every simulated rank passed the all-connected barrier")
    say(table(["ranks", "tcp store", "per rank", "file store", "per rank"], rows))
    goals = []
    for store in STORES:
        done = sorted(times[store])
        if not done:
            continue
        low = statistics.median(times[store][done[0]])
        high = statistics.median(times[store][done[-1]])
        goals.append(
            Goal(
                f"simulated rendezvous, {store} store, {done[0]} -> {done[-1]} ranks",
                f"{ms(low)} -> {ms(high)} ({high / low:.1f}x for {done[-1] / done[0]:.0f}x "
                "the ranks)",
                "report (time vs N)",
                None,
            )
        )
    chart = draw(
        "lines",
        {
            "title": "Simulated rendezvous: store join + all-connected barrier (no Gloo)",
            "xlabel": "simulated ranks (threads in 4 processes, one 2-core machine)",
            "ylabel": "seconds",
            "series": [
                {
                    "label": f"{store} store",
                    "x": sorted(times[store]),
                    "median": [statistics.median(times[store][c]) for c in sorted(times[store])],
                    "low": [min(times[store][c]) for c in sorted(times[store])],
                    "high": [max(times[store][c]) for c in sorted(times[store])],
                }
                for store in STORES
                if times[store]
            ],
        },
        args.out.with_name("rendezvous_sim.png"),
    )
    write_results(
        args.out,
        "rendezvous-sim",
        goals,
        started,
        repeats=repeats,
        processes=PROCESSES,
        chart=str(chart) if chart else None,
        ranks={
            str(count): {
                store: {"seconds": summary(times[store][count]), "runs": times[store][count]}
                for store in STORES
                if count in times[store]
            }
            for count in counts
        },
    )
    report("rendezvous-sim", goals, args.out)
    return 0
