"""A rank program for multi-process tests: ``python -m accelbackends.testing.rank_program``.

It initialises through `accelbackends.init` with a registry whose probes look under
``--root`` (a `FakeTree`, or ``/`` on real hardware), runs an
all_reduce over the CPU backend and one over the accelerator's own backend, and prints one line,
``ACCELBACKENDS-RANK {json}``, with what it saw; on failure ``ACCELBACKENDS-RANK-ERROR {json}``
and exit code 1.

Where the device cannot hold a tensor (a fake stack on a CPU-only torch), the accelerator's
backend is driven directly with a CPU tensor, which the fake stacks' Gloo process groups accept.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..plugin.torchcompat import bound_device, process_group_backend

__all__ = ["PREFIX", "main", "parse"]

PREFIX = "ACCELBACKENDS-RANK "
ERROR_PREFIX = "ACCELBACKENDS-RANK-ERROR "
_REPORTED_VARIABLES = (
    "HLS_MODULE_ID",
    "CCL_PROCESS_LAUNCHER",
    "CCL_LOCAL_RANK",
    "CCL_LOCAL_SIZE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "CUDA_VISIBLE_DEVICES",
    "NCCL_MULTI_RANK_GPU_ENABLE",
)


def _observations() -> dict[str, Any]:
    """What the fake vendor packages recorded, where they are loaded."""
    seen: dict[str, Any] = {}
    hpu = sys.modules.get("habana_frameworks.torch.hpu")
    if hpu is not None:
        seen["acquired_module_id"] = getattr(hpu, "acquired_module_id", None)
    ccl = sys.modules.get("oneccl_bindings_for_pytorch")
    if ccl is not None:
        seen["ccl_environment_at_import"] = getattr(ccl, "ccl_environment_at_import", None)
    return seen


def _device_all_reduce(device: Any, value: float) -> tuple[float | None, bool]:
    """All-reduce ``value`` over the backend serving ``device``; also says whether the tensor
    lived on the device. None where no backend serves the device (e.g. plain ``gloo``)."""
    import torch
    import torch.distributed as dist

    try:
        tensor = torch.tensor([value], device=device)
    except Exception:  # no such device here: a fake stack on a CPU-only torch
        try:
            backend = process_group_backend(dist.group.WORLD, device)
        except RuntimeError:
            return None, False
        tensor = torch.tensor([value])
        backend.allreduce([tensor]).wait()
        return float(tensor.item()), False
    dist.all_reduce(tensor)
    return float(tensor.item()), True


def _side_groups(rank: int, world_size: int, device: Any) -> dict[str, float | None]:
    """Side groups made after ``init()``, as training code makes them: one of rank 0 alone (a
    weight-update group, NVIDIA-NeMo/RL#3189) and one of every rank, each all-reduced on
    ``device`` by its members. Every rank calls `new_group` for each, members or not: where the
    world group is bound to a GPU (eager init; torch 2.15's NCCL) torch splits the side group
    from it with ``ncclCommSplit``, which every rank of the world group must join."""
    import torch
    import torch.distributed as dist

    sums: dict[str, float | None] = {}
    for name, ranks in (("alone", [0]), ("all", list(range(world_size)))):
        group = dist.new_group(ranks)
        if rank not in ranks:
            sums[name] = None
            continue
        tensor = torch.tensor([float(rank + 1)], device=device)
        dist.all_reduce(tensor, group=group)
        sums[name] = float(tensor.item())
    dist.barrier()
    return sums


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m accelbackends.testing.rank_program")
    parser.add_argument("--root", default="/", help="filesystem root the probes look under")
    parser.add_argument(
        "--preimport",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE before init (repeatable, in order)",
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="collective timeout, s")
    parser.add_argument(
        "--side-groups",
        action="store_true",
        help="also make side groups with new_group and all-reduce on them (reported as "
        "side_groups)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    import accelbackends

    try:
        for module in args.preimport:
            importlib.import_module(module)
        import torch
        import torch.distributed as dist

        registry = accelbackends.Registry(root=args.root)
        with accelbackends.distributed(
            registry=registry, timeout=args.timeout, rendezvous_timeout=args.timeout
        ) as ctx:
            cpu = torch.tensor([float(ctx.rank + 1)])
            dist.all_reduce(cpu)
            device = torch.device(ctx.device)
            device_sum, on_device = (None, False)
            if device.type != "cpu":
                device_sum, on_device = _device_all_reduce(device, float(ctx.rank + 1))
            report = {
                "rank": ctx.rank,
                "world_size": ctx.world_size,
                "local_rank": ctx.local_rank,
                "accelerator": ctx.accelerator,
                "backend": ctx.backend,
                "process_group_backend": ctx.process_group_backend,
                "get_backend": dist.get_backend(),
                "device": str(ctx.device),
                # The GPU torch 2.15's NCCL took when the group was created (None: unbound).
                "bound_device": _text(bound_device(dist.group.WORLD)),
                "cpu_sum": float(cpu.item()),
                "device_sum": device_sum,
                "on_device": on_device,
                "env": {name: os.environ.get(name) for name in _REPORTED_VARIABLES},
                "fakes": _observations(),
            }
            if args.side_groups:
                report["side_groups"] = _side_groups(
                    ctx.rank, ctx.world_size, device if on_device else torch.device("cpu")
                )
    except Exception as exc:
        print(ERROR_PREFIX + json.dumps({"type": type(exc).__name__, "message": str(exc)}))
        return 1
    print(PREFIX + json.dumps(report), flush=True)
    return 0


def parse(stdout: str) -> dict[str, Any]:
    """The report a rank printed (or its error, under the key ``"error"``)."""
    for line in stdout.splitlines():
        if line.startswith(PREFIX):
            report: dict[str, Any] = json.loads(line[len(PREFIX) :])
            return report
        if line.startswith(ERROR_PREFIX):
            return {"error": json.loads(line[len(ERROR_PREFIX) :])}
    return {"error": {"type": "NoReport", "message": stdout[-2000:]}}


if __name__ == "__main__":
    sys.exit(main())
