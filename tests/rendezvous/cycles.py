"""One rank of a job that calls ``init()``, one all_reduce and ``destroy()`` CYCLES times on one
port; prints one line per cycle, ``cycle <n> <seconds in init()> ok`` or ``cycle <n> <seconds
in init()> <Type>: <message>``, and goes on after an error (the test counts them)."""

from __future__ import annotations

import faulthandler
import os
import time

import torch
import torch.distributed as dist

import accelbackends

cycles = int(os.environ["ABTEST_CYCLES"])
timeout = float(os.environ.get("ABTEST_RENDEZVOUS_TIMEOUT", "10"))
for n in range(cycles):
    started = time.monotonic()
    # A cycle stuck past three deadlines shows where (the test then fails on its time).
    faulthandler.dump_traceback_later(3 * timeout, exit=False)
    took = None
    try:
        ctx = accelbackends.init(rendezvous_timeout=timeout)
        took = time.monotonic() - started
        value = torch.ones(1)
        dist.all_reduce(value)
        assert value.item() == ctx.world_size, value
        outcome = "ok"
    except Exception as exc:  # every error is counted by the test
        outcome = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:
        accelbackends.destroy()
    faulthandler.cancel_dump_traceback_later()
    if took is None:
        took = time.monotonic() - started
    print(f"cycle {n} {took:.2f} {outcome}", flush=True)
