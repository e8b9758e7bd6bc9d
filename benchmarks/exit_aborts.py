"""Exit aborts: how often a 2-rank training job ends with SIGABRT after its results, by way of
training and ending.

A Gloo process group runs its collectives on worker threads. A DDP wrapper or a framework's engine
keeps the group, and its workers, alive after ``destroy_process_group()``; a worker still
releasing the last collective's tensors when the interpreter finalises aborts the process
("terminate called without an active exception", exit 134 or -6), and torchrun then reports the
job as failed although it trained (torch 2.13 on CPU). Each run is a torchrun job of
2 ranks that trains for a few steps, prints ``DONE`` on both ranks and ends. The ways, each
documented way beside its plain twin (the reference):

- ``distributed``: ``with accelbackends.distributed():`` around a DDP loop; twin ``plain``,
  torch's DDP tutorial (``init_process_group`` ... ``destroy_process_group()``);
- ``init-only``: ``accelbackends.init()`` and no ``destroy()``; twin ``init-only-no-hook``, the
  same with accelbackends' exit handlers unregistered;
- ``lightning-plugin``: ``Trainer(devices=2, strategy="ddp",
  plugins=[AccelBackendsEnvironment()])``; twin ``lightning``, the same Trainer without the plugin;
- ``accelerate-verify``: ``init()``, ``Accelerator()``, ``verify()``, ..., ``destroy()``; twin
  ``accelerate``, ``Accelerator(cpu=True)`` as Accelerate's examples use it, no teardown;
- ``deepspeed-integration``: ``integrations.deepspeed.init_distributed()``, ..., ``destroy()``;
  twin ``deepspeed``, ``deepspeed.init_distributed()`` as DeepSpeed's examples use it.

A run counts as **aborted** when both ranks printed ``DONE`` but the job did not exit 0 and a
rank died of SIGABRT; as **failed** when it did not finish training. Rounds take every way in
rotating order (so that load drift hits every way alike), ``--parallel`` jobs at a time (2 jobs
of 2 ranks on 2 cores is the loaded machine the abort was first measured on). Goal: 0 aborted for
every documented way, while the twins still abort.

Usage: ``python -m benchmarks.exit_aborts [--runs 100] [--reference-runs 40] [--ways a,b,...]
[--parallel 2]``; not part of ``python -m benchmarks all``: it takes about an hour on 2 cores.
Needs ``.[frameworks]`` and DeepSpeed for the framework ways (``--ways`` picks others).
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ._common import clean_env

#: Each documented way, and its plain twin.
TWINS = {
    "distributed": "plain",
    "init-only": "init-only-no-hook",
    "lightning-plugin": "lightning",
    "accelerate-verify": "accelerate",
    "deepspeed-integration": "deepspeed",
}
WAYS = tuple(way for pair in TWINS.items() for way in pair)

_SCRIPT = """
import atexit, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

way = sys.argv[1]


def loop(model, step):
    for _ in range(5):
        step(model(torch.randn(16, 64)).pow(2).mean())


def train():
    model = DistributedDataParallel(torch.nn.Linear(64, 64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(loss):
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    loop(model, step)
    print("DONE", dist.get_rank(), flush=True)
    return model  # kept alive to the end, as a training script's module is


if way == "plain":
    dist.init_process_group("gloo")
    model = train()
    dist.destroy_process_group()
elif way == "distributed":
    import accelbackends

    with accelbackends.distributed():
        model = train()
elif way.startswith("init-only"):
    import accelbackends
    from accelbackends.job import lifecycle
    from accelbackends.host import workers

    accelbackends.init()
    if way == "init-only-no-hook":
        atexit.unregister(lifecycle._destroy_at_exit)
        atexit.unregister(workers._settle_at_exit)
    model = train()
elif way.startswith("lightning"):
    import lightning.pytorch as pl

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(64, 64)

        def training_step(self, batch, index):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    plugins = []
    if way == "lightning-plugin":
        from accelbackends.integrations.lightning import AccelBackendsEnvironment

        plugins = [AccelBackendsEnvironment()]
    data = torch.utils.data.TensorDataset(torch.randn(160, 64))
    trainer = pl.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", plugins=plugins, max_steps=5, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=16))
    print("DONE", trainer.global_rank, flush=True)
elif way.startswith("accelerate"):
    from accelerate import Accelerator

    if way == "accelerate-verify":
        import accelbackends
        from accelbackends.integrations.accelerate import verify

        accelbackends.init()
        accelerator = Accelerator()
        verify(accelerator)
    else:
        accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(64, 64)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))

    def step(loss):
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()

    loop(model, step)
    print("DONE", accelerator.process_index, flush=True)
    if way == "accelerate-verify":
        accelbackends.destroy()
elif way.startswith("deepspeed"):
    if way == "deepspeed-integration":
        import accelbackends
        from accelbackends.integrations.deepspeed import init_distributed

        init_distributed()
        import deepspeed
    else:
        import deepspeed

        deepspeed.init_distributed(dist_backend="gloo")
    model = torch.nn.Linear(64, 64)
    config = {"train_batch_size": 32, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}}
    parameters = model.parameters()
    engine, *_ = deepspeed.initialize(model=model, model_parameters=parameters, config=config)

    def step(loss):
        engine.backward(loss)
        engine.step()

    loop(engine, step)
    print("DONE", dist.get_rank(), flush=True)
    if way == "deepspeed-integration":
        accelbackends.destroy()
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=100, help="runs of each way (default 100)")
    parser.add_argument(
        "--reference-runs",
        type=int,
        default=None,
        help="runs of each plain twin, spread evenly over the rounds (default: --runs)",
    )
    parser.add_argument(
        "--ways", default=",".join(WAYS), help=f"comma-separated ways (of {', '.join(WAYS)})"
    )
    parser.add_argument("--parallel", type=int, default=2, help="jobs at a time (default 2)")
    parser.add_argument("--quick", action="store_true", help="2 runs of each way")


def _one(script: Path, way: str, folder: str) -> str:
    env = clean_env(PYTHONUNBUFFERED="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    result = subprocess.run(
        [*command, "--nproc-per-node", "2", str(script), way],
        capture_output=True,
        text=True,
        env=env,
        cwd=folder,  # Lightning's and DeepSpeed's files land there
        timeout=600,
        check=False,
    )
    trained = result.stdout.count("DONE") == 2  # the ranks' lines may interleave
    if result.returncode == 0 and trained:
        return "clean"
    output = result.stdout + result.stderr
    aborted = trained and ("Signals.SIGABRT" in output or "exitcode  : -6" in output)
    outcome = "aborted" if aborted else "failed"
    _LOGS.mkdir(parents=True, exist_ok=True)
    log = _LOGS / f"{way}-{outcome}-{time.strftime('%H%M%S')}-{next(_LOG_NUMBERS)}.log"
    log.write_text(f"exit {result.returncode}\n{output}")
    return outcome


_LOGS = Path(__file__).parent / "results" / "exit_aborts"
#: Numbers the logs of one run (the jobs' threads share it).
_LOG_NUMBERS = itertools.count(1)


def _schedule(ways: list[str], runs: int, reference_runs: int) -> list[str]:
    """Every way once a round, in rotating order; a twin with fewer runs than the documented
    ways skips rounds evenly."""
    order: list[str] = []
    for index in range(runs):
        rotated = ways[index % len(ways) :] + ways[: index % len(ways)]
        for way in rotated:
            twin = way not in TWINS
            if twin and (index + 1) * reference_runs // runs == index * reference_runs // runs:
                continue
            order.append(way)
    return order


def main(args: argparse.Namespace) -> int:
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    unknown = sorted(set(ways) - set(WAYS))
    if unknown or not ways:
        print(f"unknown ways {unknown or ways}; known: {', '.join(WAYS)}", file=sys.stderr)
        return 2
    runs = 2 if args.quick else args.runs
    reference_runs = runs if args.reference_runs is None else min(args.reference_runs, runs)
    for name, value, least in (
        ("--runs", runs, 1),
        ("--reference-runs", reference_runs, 0),
        ("--parallel", args.parallel, 1),
    ):
        if value < least:
            print(f"{name} {value}: use an integer of {least} or more", file=sys.stderr)
            return 2
    counts = {way: {"clean": 0, "aborted": 0, "failed": 0} for way in ways}
    order = _schedule(ways, runs, reference_runs)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as folder, ThreadPoolExecutor(args.parallel) as pool:
        script = Path(folder) / "exit_twin.py"
        script.write_text(_SCRIPT)
        outcomes = pool.map(lambda way: (way, _one(script, way, folder)), order)
        for done, (way, outcome) in enumerate(outcomes, 1):
            counts[way][outcome] += 1
            if outcome != "clean" or done % len(ways) == 0:
                aborted = ", ".join(f"{w} {counts[w]['aborted']}" for w in ways)
                print(
                    f"{done}/{len(order)} jobs ({way}: {outcome}); aborted so far: {aborted}",
                    flush=True,
                )
    elapsed = time.monotonic() - started
    print(f"{len(order)} jobs, {args.parallel} at a time, {elapsed:.0f} s")
    print(f"{'way':<22} {'runs':>5} {'clean':>6} {'aborted':>8} {'failed':>7}")
    for way, count in counts.items():
        total = sum(count.values())
        print(
            f"{way:<22} {total:>5} {count['clean']:>6} {count['aborted']:>8} {count['failed']:>7}"
        )
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    record = {"runs": runs, "reference_runs": reference_runs, "parallel": args.parallel}
    record |= {"seconds": round(elapsed), "counts": counts}
    (out / "exit_aborts.json").write_text(json.dumps(record, indent=1))
    failed = [way for way in ways if way in TWINS and counts[way]["clean"] < runs]
    if failed:
        print(f"documented ways that did not end cleanly every time: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.exit_aborts", description=__doc__)
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
