"""One rank of a 2-rank job (run under torchrun) with Accelerate, the transformers Trainer or
DeepSpeed on the CPU; prints one ``RESULT`` line: the rank and world size the framework saw and
a digest of the trained weights.

Usage: ``python hf_train.py MODE OUTPUT_DIR``; MODE one of accelerate, bare-accelerate, attach,
trainer, deepspeed, and the wrong orders that must stop before training: accelerator-first
(``Accelerator()`` without ``cpu=True``, then ``attach()``), trainer-first (``TrainingArguments``,
then ``attach()``), launched (``init()`` in what ``accelerate launch`` started).
"""

from __future__ import annotations

import hashlib
import json
import sys

import torch

import accelbackends

MODE, OUTPUT = sys.argv[1], sys.argv[2]


def digest(module: torch.nn.Module) -> str:
    weights = b"".join(p.detach().cpu().numpy().tobytes() for p in module.parameters())
    return hashlib.sha256(weights).hexdigest()[:16]


def report(rank: int, world_size: int, model: torch.nn.Module, **extra: object) -> None:
    line = {"rank": rank, "world_size": world_size, "digest": digest(model), **extra}
    sys.stdout.write("RESULT " + json.dumps(line) + "\n")
    sys.stdout.flush()


def train_with_accelerate(accelerator: object) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)  # type: ignore[attr-defined]
    generator = torch.Generator().manual_seed(accelerator.process_index + 1)  # type: ignore[attr-defined]
    for _ in range(3):
        loss = model(torch.randn(8, 4, generator=generator)).pow(2).mean()
        accelerator.backward(loss)  # type: ignore[attr-defined]
        optimizer.step()
        optimizer.zero_grad()
    return accelerator.unwrap_model(model)  # type: ignore[attr-defined,no-any-return]


if MODE in ("accelerate", "bare-accelerate"):
    from accelerate import Accelerator

    ctx = accelbackends.init()
    accelerator = Accelerator()
    if MODE == "accelerate":
        from accelbackends.integrations.accelerate import verify

        verify(accelerator)
    model = train_with_accelerate(accelerator)
    report(accelerator.process_index, accelerator.num_processes, model, group=ctx.world_size)
    accelbackends.destroy()
elif MODE == "attach":
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)  # Accelerate makes the group
    ctx = accelbackends.attach(device=accelerator.device)
    model = train_with_accelerate(accelerator)
    report(ctx.rank, ctx.world_size, model, launcher=ctx.launcher, backend=ctx.backend)
elif MODE == "accelerator-first":
    from accelerate import Accelerator

    accelerator = Accelerator()  # on the CPU: a group of 2, yet DistributedType.NO
    ctx = accelbackends.attach(device=accelerator.device)  # must raise here
    model = train_with_accelerate(accelerator)
    report(accelerator.process_index, accelerator.num_processes, model, group=ctx.world_size)
elif MODE == "launched":
    from accelerate import Accelerator

    ctx = accelbackends.init()  # must raise: accelerate launch asked for 2 and started 1
    accelerator = Accelerator()
    model = train_with_accelerate(accelerator)
    report(accelerator.process_index, accelerator.num_processes, model, group=ctx.world_size)
elif MODE in ("trainer", "trainer-first"):
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    if MODE == "trainer":
        ctx = accelbackends.init()
    config = BertConfig(
        vocab_size=32,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=16,
        num_labels=2,
    )
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)
    generator = torch.Generator().manual_seed(1)
    data = [
        {"input_ids": torch.randint(0, 32, (8,), generator=generator), "labels": i % 2}
        for i in range(32)
    ]
    args = TrainingArguments(
        output_dir=OUTPUT,
        max_steps=3,
        per_device_train_batch_size=4,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    if MODE == "trainer-first":
        print("PARALLEL_MODE", args.parallel_mode, flush=True)  # makes the group: NOT_PARALLEL
        ctx = accelbackends.attach()  # must raise here
    Trainer(model=model, args=args, train_dataset=data).train()
    report(args.process_index, args.world_size, model, group=ctx.world_size)
    accelbackends.destroy()
elif MODE == "deepspeed":
    from accelbackends.integrations.deepspeed import init_distributed

    ctx = init_distributed()  # before importing DeepSpeed, which detects at import
    import deepspeed

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    config = {"train_batch_size": 16, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}}
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=config
    )
    generator = torch.Generator().manual_seed(ctx.rank + 1)
    for _ in range(3):
        loss = engine(torch.randn(8, 4, generator=generator)).pow(2).mean()
        engine.backward(loss)
        engine.step()
    accelerator = deepspeed.get_accelerator().device_name()
    report(deepspeed.comm.get_rank(), deepspeed.comm.get_world_size(), model, ds=accelerator)
    accelbackends.destroy()
