"""Exit aborts: how often a 2-rank DDP job ends with SIGABRT after its results, by way of ending.

A DDP module keeps the Gloo backend of its group, and the backend's worker threads, alive after
``destroy_process_group()``; a worker that drops a tensor while the interpreter finalises aborts
the process ("terminate called without an active exception", exit 134 or -6), and torchrun then
reports the job as failed although it trained (issue 27, torch 2.13 on CPU). Each run is a
torchrun job of 2 ranks that trains a DDP module for a few steps, prints ``DONE`` on both ranks
and ends one of these ways, in rotating order (so that load drift hits every way alike):

- ``plain``: torch's DDP tutorial (``init_process_group`` ... ``destroy_process_group()``);
- ``distributed``: ``with accelbackends.distributed():`` (``destroy()`` at the block's end);
- ``init-only``: ``accelbackends.init()`` and no ``destroy()`` (the exit hook tears down);
- ``init-only-no-hook``: the same with accelbackends' exit hook unregistered (the reference
  for the hook).

A run counts as **aborted** when both ranks printed ``DONE`` but the job did not exit 0 and a
rank died of SIGABRT; as **failed** when it did not finish training. Goal: ``distributed`` and
``init-only`` abort less often than ``plain`` and ``init-only-no-hook`` (0 in the runs made).

Usage: ``python -m benchmarks.exit_aborts [--runs 40] [--ways plain,distributed,...]``; not part
of ``python -m benchmarks all``: 40 runs of each way take about half an hour on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WAYS = ("plain", "distributed", "init-only", "init-only-no-hook")

_SCRIPT = """
import atexit, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

way = sys.argv[1]


def train():
    model = DistributedDataParallel(torch.nn.Linear(64, 64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        model(torch.randn(16, 64)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
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
else:
    import accelbackends
    from accelbackends.job import lifecycle

    accelbackends.init()
    if way == "init-only-no-hook":
        atexit.unregister(lifecycle._destroy_at_exit)
    model = train()
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=40, help="runs of each way (default 40)")
    parser.add_argument(
        "--ways", default=",".join(WAYS), help=f"comma-separated ways (of {', '.join(WAYS)})"
    )
    parser.add_argument("--quick", action="store_true", help="3 runs of each way")


def _one(script: Path, way: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELBACKENDS_")}
    env["PYTHONUNBUFFERED"] = "1"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    result = subprocess.run(
        [*command, "--nproc-per-node", "2", str(script), way],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    trained = result.stdout.count("DONE") == 2
    if result.returncode == 0 and trained:
        return "clean"
    output = result.stdout + result.stderr
    if trained and ("Signals.SIGABRT" in output or "exitcode  : -6" in output):
        return "aborted"
    return "failed"


def main(args: argparse.Namespace) -> int:
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    unknown = sorted(set(ways) - set(WAYS))
    if unknown:
        print(f"unknown ways {unknown}; known: {', '.join(WAYS)}", file=sys.stderr)
        return 2
    runs = 3 if args.quick else args.runs
    counts = {way: {"clean": 0, "aborted": 0, "failed": 0} for way in ways}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "exit_twin.py"
        script.write_text(_SCRIPT)
        for index in range(runs):
            order = ways[index % len(ways) :] + ways[: index % len(ways)]
            for way in order:
                counts[way][_one(script, way)] += 1
            aborted = ", ".join(f"{way} {counts[way]['aborted']}" for way in ways)
            print(f"round {index + 1}/{runs}: aborted so far {aborted}", flush=True)
    print(f"{runs} runs of each way, {time.monotonic() - started:.0f} s")
    print(f"{'way':<20} {'clean':>6} {'aborted':>8} {'failed':>7}")
    for way, count in counts.items():
        print(f"{way:<20} {count['clean']:>6} {count['aborted']:>8} {count['failed']:>7}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "exit_aborts.json").write_text(json.dumps({"runs": runs, "counts": counts}, indent=1))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.exit_aborts", description=__doc__)
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
