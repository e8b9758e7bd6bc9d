"""One rank of a multi-process test: ``python ascend_rank.py ROOT [MODULE ...]``.

Imports each MODULE (to stage a backend-name clash), initialises through accelbackends.init()
with probes under ROOT, all-reduces over the CPU backend and over the NPU's backend, and prints
one JSON line with what it saw: ``{"error": {...}}`` on failure.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

import accelbackends


def run(root: str, modules: list[str]) -> dict[str, Any]:
    for module in modules:
        importlib.import_module(module)
    import torch
    import torch.distributed as dist

    registry = accelbackends.Registry(root=root)
    with accelbackends.distributed(registry=registry, timeout=60, rendezvous_timeout=60) as ctx:
        cpu = torch.tensor([float(ctx.rank + 1)])
        dist.all_reduce(cpu)
        # The fake HCCL is Gloo underneath: it takes CPU tensors for the "npu" device.
        npu = torch.tensor([float(ctx.rank + 1)])
        dist.group.WORLD._get_backend(torch.device("npu")).allreduce([npu]).wait()
        return {
            "rank": ctx.rank,
            "accelerator": ctx.accelerator,
            "backend": ctx.backend,
            "process_group_backend": ctx.process_group_backend,
            "device": str(ctx.device),
            "current_device": torch.npu.current_device(),
            "bound_device_id": sys.modules["torch_npu.npu"].bound_device_id,
            "cpu_sum": cpu.item(),
            "npu_sum": npu.item(),
        }


def main() -> int:
    try:
        report = run(sys.argv[1], sys.argv[2:])
    except Exception as exc:
        print(json.dumps({"error": {"type": type(exc).__name__, "message": str(exc)}}))
        return 1
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
