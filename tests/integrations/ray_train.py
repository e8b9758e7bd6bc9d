"""Ray Train with accelbackends' TorchConfig on a real local Ray (``ray.init(num_cpus=2)``).

``python ray_train.py OUT`` runs two trainers in one Ray session (Ray's start-up is most of the
time): two workers train a small model with DDP, and each writes what ``accelbackends.attach()``
said and its final weights to ``OUT/rank<N>.json``; under Ray's own TorchConfig each worker
writes what ``attach()`` says to ``OUT/attached<N>.json``; the README's example (``with
accelbackends.distributed(seed=0)``) writes what it saw to ``OUT/readme<N>.json``; then Ray gives
one worker a (declared) GPU while accelbackends selects cpu, and the failure's message goes to
``OUT/error.txt``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ray
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from accelbackends.integrations.ray import TorchConfig

OUT = Path(sys.argv[1])


def train(config: dict[str, str]) -> None:
    import os
    import threading

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import accelbackends

    ctx = accelbackends.attach()
    torch.manual_seed(ctx.rank)  # different starting weights: DDP must make them equal
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(100 + ctx.rank)  # each rank its own data
    for _ in range(5):
        x = torch.randn(8, 4, generator=generator)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    report = {
        "rank": ctx.rank,
        "world_size": ctx.world_size,
        "group_world_size": dist.get_world_size(),
        "launcher": ctx.launcher,
        "accelerator": ctx.accelerator,
        "backend": ctx.process_group_backend,
        "master_addr": ctx.master_addr,
        "rendezvous_timeout": ctx.rendezvous_timeout,
        "reason": ctx.reason,
        "thread": threading.current_thread().name,
        "cpus": sorted(os.sched_getaffinity(0)),
        "context_cpus": sorted(ctx.cpus or ()),
        "cpu_affinity": ctx.cpu_affinity,
        "env_world_size": os.environ.get("WORLD_SIZE"),
        "weights": [p.detach().flatten().tolist() for p in model.parameters()],
    }
    (Path(config["out"]) / f"rank{ctx.rank}.json").write_text(json.dumps(report))


def attach_only(config: dict[str, str]) -> None:
    """Under Ray's own TorchConfig, which made the group: what attach() says."""
    import accelbackends

    ctx = accelbackends.attach()
    report = {"launcher": ctx.launcher, "world_size": ctx.world_size, "rank": ctx.rank}
    (Path(config["out"]) / f"attached{ctx.rank}.json").write_text(json.dumps(report))


def readme_example(config: dict[str, str]) -> None:
    """The README's script, as it stands, inside a worker TorchConfig() initialised (seed=None)."""
    import torch
    import torch.distributed as dist

    import accelbackends

    with accelbackends.distributed(seed=0) as ctx:
        first_draw = torch.rand(1).item()  # seeded by this block: the same on every worker
        grad = torch.ones(4, device=ctx.device) * ctx.rank
        dist.all_reduce(grad)
    report = {
        "rank": ctx.rank,
        "seed": ctx.seed,
        "draw": first_draw,
        "grad": grad.tolist(),
        "group_alive_after_block": dist.is_initialized(),
    }
    (Path(config["out"]) / f"readme{ctx.rank}.json").write_text(json.dumps(report))


def main() -> None:
    # One declared GPU: Ray hands it out to a worker that asks, though this machine has none.
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False)
    run = RunConfig(storage_path=str(OUT / "ray"), failure_config=FailureConfig(max_failures=0))
    TorchTrainer(
        train,
        train_loop_config={"out": str(OUT)},
        # "on": cores of its own per worker where there are enough, else the NUMA node's.
        torch_config=TorchConfig(rendezvous_timeout_s=60, cpu_affinity="on"),
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run,
    ).fit()
    TorchTrainer(
        readme_example,
        train_loop_config={"out": str(OUT)},
        torch_config=TorchConfig(),
        scaling_config=ScalingConfig(num_workers=2),
        run_config=run,
    ).fit()
    TorchTrainer(
        attach_only,
        train_loop_config={"out": str(OUT)},
        scaling_config=ScalingConfig(num_workers=2),  # Ray's own TorchConfig
        run_config=run,
    ).fit()
    try:
        TorchTrainer(
            train,
            train_loop_config={"out": str(OUT)},
            torch_config=TorchConfig(),
            scaling_config=ScalingConfig(num_workers=1, use_gpu=True),
            run_config=run,
        ).fit()
    except Exception as exc:  # Ray wraps the worker's ConfigError in its own errors
        (OUT / "error.txt").write_text(f"{type(exc).__name__}: {exc}")
    else:
        (OUT / "error.txt").write_text("no error")


if __name__ == "__main__":
    main()
