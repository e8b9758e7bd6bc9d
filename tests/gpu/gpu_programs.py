"""Programs the GPU tests run in their own process (a CUDA context must not be made in the test
process before it forks ranks): each prints one ``RESULT`` line of JSON.

Usage: ``python gpu_programs.py lightning|accelerate|spawn|spawn-dies``
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import torch

import accelbackends


def result(**fields: Any) -> None:
    sys.stdout.write("RESULT " + json.dumps(fields) + "\n")
    sys.stdout.flush()


def train(model: torch.nn.Module, device: Any, step: Any) -> float:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        loss = model(torch.randn(8, 4, device=device)).pow(2).mean()
        step(loss)
        optimizer.step()
        optimizer.zero_grad()
    return float(loss)


def lightning() -> None:
    import lightning.pytorch as pl

    from accelbackends.integrations.lightning import AccelBackendsEnvironment, trainer_ddp

    class Tiny(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, _: int) -> Any:
            self.trained_on = str(self.device)  # Lightning moves the module back to the CPU after
            return self.layer(batch).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    assert AccelBackendsEnvironment is not None
    data = torch.utils.data.DataLoader(torch.randn(24, 4), batch_size=8)
    trainer = pl.Trainer(
        accelerator="gpu",
        devices=1,
        strategy=trainer_ddp(),
        max_steps=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    module = Tiny()
    trainer.fit(module, data)
    ctx = accelbackends.attach()
    result(device=module.trained_on, backend=ctx.backend, world_size=ctx.world_size)


def accelerate() -> None:
    from accelerate import Accelerator

    from accelbackends.integrations.accelerate import verify

    ctx = accelbackends.init()
    accelerator = Accelerator()
    verify(accelerator)
    model = accelerator.prepare(torch.nn.Linear(4, 1))
    loss = train(model, accelerator.device, accelerator.backward)
    # Accelerate names the current device without its index ("cuda"): where it trains is the
    # current device, which accelbackends bound.
    result(
        device=str(torch.device(accelerator.device.type, torch.cuda.current_device())),
        ctx_device=str(ctx.device),
        parameters=str(next(model.parameters()).device),
        loss=loss,
    )
    accelbackends.destroy()


def _on_gpu(ctx: accelbackends.Context) -> str:
    import torch.distributed as dist

    tensor = torch.ones(4, device=ctx.device)
    dist.all_reduce(tensor)
    return f"{ctx.device} {tensor.sum().item():g}"


def _dies(ctx: accelbackends.Context) -> None:
    import torch.distributed as dist

    if ctx.rank == 0:
        os.kill(os.getpid(), signal.SIGSEGV)
    dist.barrier()


def spawn() -> None:
    result(returned=accelbackends.spawn(_on_gpu, nprocs=1))


def spawn_dies() -> None:
    try:
        accelbackends.spawn(_dies, nprocs=2)
    except accelbackends.AccelBackendsError as error:
        result(error=str(error))


if __name__ == "__main__":
    {"lightning": lightning, "accelerate": accelerate, "spawn": spawn, "spawn-dies": spawn_dies}[
        sys.argv[1]
    ]()
