"""A job's rank 0: 50 all_reduces of ones; prints how many came back wrong and exits 0."""

from __future__ import annotations

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
accelbackends.destroy()
