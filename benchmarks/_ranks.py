"""Starting N local ranks two ways, and timing how soon they can communicate.

- *hand-written*: what the PyTorch tutorial has a user write: ``MASTER_ADDR=localhost`` and a
  free ``MASTER_PORT`` in the environment, ``torch.multiprocessing`` starting the ranks, and
  ``init_process_group("gloo", rank=rank, world_size=n)`` in each (``env://``: rank 0 hosts a
  TCPStore, the others connect to it).
- *accelbackends*: ``accelbackends.spawn(fn, n)``, whose ranks run ``accelbackends.init()``
  through the ``FileStore`` in the private directory that ``spawn()`` makes.

Both fork from this process after it imported torch (``torch.multiprocessing`` defaults to the
``spawn`` start method, which re-imports torch in every rank and would only measure that), and
both end with one all_reduce whose result is checked. Times are taken with the system-wide
monotonic clock, so a rank's timestamps compare with the parent's launch time.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

#: A run whose initialisation took this much longer than the quickest is counted as stalled
#: (the stall of a lost DNS answer is 5 s; Gloo start-up jitter on 2 cores is well under 1 s).
STALL_SECONDS = 3.0


@dataclass(frozen=True)
class RunTiming:
    """One job: seconds from the launch until every rank had initialised, until every rank's
    first all_reduce had finished, and until every rank had exited."""

    init: float
    ready: float
    wall: float


def free_port() -> int:
    """A port the kernel reports free now (what a user's ``find_free_port`` helper does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _check_all_reduce(world_size: int) -> None:
    import torch
    import torch.distributed as dist

    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    if tensor.item() != world_size:
        raise RuntimeError(f"all_reduce gave {tensor.item()}, expected {world_size}")


def _hand_rank(rank: int, world_size: int, queue: Any) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    initialised = time.monotonic()
    _check_all_reduce(world_size)
    ready = time.monotonic()
    dist.destroy_process_group()
    queue.put((rank, initialised, ready))


def run_handwritten(world_size: int) -> RunTiming:
    """One job the hand-written way."""
    import torch.multiprocessing as tmp

    context = multiprocessing.get_context("fork")
    queue = context.SimpleQueue()
    saved = {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT")}
    os.environ.update(MASTER_ADDR="localhost", MASTER_PORT=str(free_port()))
    try:
        launch = time.monotonic()
        tmp.start_processes(
            _hand_rank, args=(world_size, queue), nprocs=world_size, start_method="fork"
        )
        finished = time.monotonic()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    stamps = [queue.get() for _ in range(world_size)]
    return RunTiming(
        max(s[1] for s in stamps) - launch, max(s[2] for s in stamps) - launch, finished - launch
    )


def _our_rank(ctx: Any) -> tuple[int, float, float]:
    initialised = time.monotonic()
    _check_all_reduce(ctx.world_size)
    return ctx.rank, initialised, time.monotonic()


def run_accelbackends(world_size: int, *, preselect: bool = False) -> RunTiming:
    """One job through ``accelbackends.spawn()``. The parent's registry is reset first, so
    every rank loads its plugins and detects itself, as in a program that calls ``spawn()``
    first thing; with ``preselect`` the parent calls ``accelbackends.select()`` before
    ``spawn()``, and the forked ranks inherit its loaded plugins and detection."""
    import accelbackends

    accelbackends.reset()
    launch = time.monotonic()
    if preselect:
        accelbackends.select()
    stamps = accelbackends.spawn(_our_rank, world_size)
    finished = time.monotonic()
    return RunTiming(
        max(s[1] for s in stamps) - launch, max(s[2] for s in stamps) - launch, finished - launch
    )


def run_preselected(world_size: int) -> RunTiming:
    return run_accelbackends(world_size, preselect=True)


HANDWRITTEN, OURS, PRESELECTED = "hand-written", "accelbackends", "accelbackends, select() first"
RUNNERS = {HANDWRITTEN: run_handwritten, OURS: run_accelbackends, PRESELECTED: run_preselected}


def is_stall(seconds: float, quickest: float) -> bool:
    return seconds - quickest >= STALL_SECONDS


def prepare() -> None:
    """Import what every rank needs once, here, so that forked ranks inherit it alike."""
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    import torch.distributed
    import torch.multiprocessing  # noqa: F401

    # The public names, not ``import accelbackends.spawn``: importing that submodule first
    # would leave the attribute ``accelbackends.spawn`` naming the module, not the function.
    from accelbackends import init, spawn  # noqa: F401
