"""Train a tiny model for three steps with Lightning on the CPU and print one ``RESULT`` line
per rank: the rank and world size Lightning saw, and a digest of the trained weights.

Usage: ``python lightning_train.py fabric|trainer plugin|init-first|bare-init-first``
"""

from __future__ import annotations

import gc
import hashlib
import json
import sys

import torch

import accelbackends
from accelbackends.integrations.lightning import AccelBackendsEnvironment

MODE, HOW = sys.argv[1], sys.argv[2]
DEVICES = 2


def digest(module: torch.nn.Module) -> str:
    weights = b"".join(p.detach().cpu().numpy().tobytes() for p in module.parameters())
    return hashlib.sha256(weights).hexdigest()[:16]


def new_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(4, 1)


def report(rank: int, world_size: int, model: torch.nn.Module, ctx: object = None) -> None:
    line = {"rank": rank, "world_size": world_size, "digest": digest(model)}
    if ctx is not None:
        line["ctx"] = [ctx.rank, ctx.world_size, ctx.launcher]  # type: ignore[attr-defined]
    sys.stdout.write("RESULT " + json.dumps(line) + "\n")
    sys.stdout.flush()


if HOW.endswith("init-first"):
    accelbackends.init()
plugins = [] if HOW.startswith("bare") else [AccelBackendsEnvironment()]

if MODE == "fabric":
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=DEVICES, strategy="ddp", plugins=plugins)
    fabric.launch()
    ctx = accelbackends.attach()
    model = new_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    generator = torch.Generator().manual_seed(fabric.global_rank + 1)
    for _ in range(3):
        loss = model(torch.randn(8, 4, generator=generator)).pow(2).mean()
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    report(fabric.global_rank, fabric.world_size, model, ctx)
    # Tear down while the interpreter is whole, as Trainer.fit does at its end: a DDP module
    # alive at exit keeps its Gloo group's worker threads, and a worker that drops a tensor
    # during interpreter finalisation aborts the process ("terminate called without an active
    # exception", exit 134; seen about once in 30 runs under mpirun on a loaded machine).
    del model, optimizer
    gc.collect()
    torch.distributed.destroy_process_group()
else:
    import lightning.pytorch as pl

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = new_model()

        def training_step(self, batch: list[torch.Tensor], index: int) -> torch.Tensor:
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(
        torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
    )
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=DEVICES,
        strategy="ddp",
        plugins=plugins,
        max_steps=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    tiny = Tiny()
    trainer.fit(tiny, loader)
    ctx = accelbackends.attach()
    report(trainer.global_rank, trainer.world_size, tiny, ctx)
