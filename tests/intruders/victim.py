"""A job's rank: 50 all_reduces of ones; prints how many came back wrong and exits 0.

With ``ABTEST_HOLD=<path>`` the rank keeps its process group (and rank 0 its store) until that
file exists, so that a test can try to join a rendezvous that has finished.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

import accelbackends

ctx = accelbackends.init()
wrong = 0
for _ in range(50):
    value = torch.ones(1)
    dist.all_reduce(value)
    wrong += int(value.item() != ctx.world_size)
print(f"victim: rank {ctx.rank} ran 50 all_reduce calls, {wrong} wrong", flush=True)
hold = os.environ.get("ABTEST_HOLD")
while hold and not os.path.exists(hold):
    time.sleep(0.05)
accelbackends.destroy()
