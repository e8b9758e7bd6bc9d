"""On an NVIDIA node: `info` and `select()` beside the interpreter and the tools people run, and
one-rank NCCL ``init()`` beside hand-written ``init_process_group``.

Two parts, each with the method of the CPU benchmarks (cold processes, rounds whose order
rotates, a warm-up round dropped, medians; peak memory is the child's own ``ru_maxrss``):

1. **Cold commands**: ``python -c pass`` (the reference), ``nvidia-smi -L``,
   ``accelbackends.select()``, ``accelbackends info --json``; then, in rounds of their own
   because each takes seconds, ``python -m torch.utils.collect_env`` and ``accelerate env``
   (where Accelerate is installed).
2. **One-rank init on NCCL**, a fresh process per measurement, clocks inside the process after
   ``import torch``: ``init`` is the call (``import accelbackends`` included on its side), ``first
   result`` one ``all_reduce`` of 4 MiB on the GPU with the device synchronised. The sides:
   hand-written ``set_device`` + ``init_process_group("nccl")`` (lazy: NCCL connects at the first
   collective), hand-written with ``device_id=`` (eager), and ``accelbackends.init()`` as a
   plain ``env://`` rank. Where the node has several GPUs, the same at 2, 4 and 8 ranks.

Goals: ``info --json`` <= 2x ``python -c pass``, >= 40x faster than ``accelerate env`` and
>= 15x faster than ``collect_env``, peak memory <= 4x the interpreter's; ``init()`` to the first
result <= +5 % of hand-written (lazy against lazy).

Usage: ``python -m benchmarks gpu [--rounds 9] [--init-rounds 5] [--quick]`` (under 5 minutes
on one GPU). Without an NVIDIA GPU it says so and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from . import _ranks
from ._common import (
    ROOT,
    ChildRun,
    Goal,
    add_common_arguments,
    clean_env,
    interleaved,
    mib,
    ms,
    report,
    say,
    table,
    write_results,
)

PASS = "python -c pass"
SMI = "nvidia-smi -L"
SELECT = "accelbackends.select()"
INFO = "accelbackends info --json"
COLLECT_ENV = "python -m torch.utils.collect_env"
ACCELERATE_ENV = "accelerate env"

HAND_LAZY = "hand-written set_device + init_process_group('nccl')"
HAND_EAGER = "hand-written with device_id="
OURS = "accelbackends.init()"
INIT_SIDES = (HAND_LAZY, HAND_EAGER, OURS)

INFO_GOAL, ACCELERATE_GOAL, COLLECT_GOAL, RSS_GOAL, INIT_GOAL = 2.0, 40.0, 15.0, 4.0, 0.05
ALL_REDUCE_BYTES = 4 * 2**20

# One rank of a one-GPU-per-rank job, as a launcher would start it; prints its clocks as JSON.
_RANK = """
import json, os, sys, time
import torch
side, local_rank = sys.argv[1], int(os.environ["LOCAL_RANK"])
start = time.perf_counter()
if side == "ours":
    import accelbackends
    ctx = accelbackends.init()
    device = ctx.device
else:
    import torch.distributed as dist
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    extra = {"device_id": device} if side == "eager" else {}
    dist.init_process_group("nccl", **extra)
initialised = time.perf_counter()
import torch.distributed as dist
tensor = torch.ones(int(sys.argv[2]) // 4, device=device)
dist.all_reduce(tensor)
torch.cuda.synchronize(device)
ready = time.perf_counter()
if tensor[0].item() != dist.get_world_size():
    sys.exit(f"all_reduce gave {tensor[0].item()}")
if side == "ours":
    accelbackends.destroy()
else:
    dist.destroy_process_group()
done = time.perf_counter()
print(json.dumps({"init": initialised - start, "first": ready - initialised,
                  "ready": ready - start, "destroy": done - ready}))
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, "gpu")
    parser.add_argument("--rounds", type=int, default=9, help="rounds of the quick commands (9)")
    parser.add_argument(
        "--heavy-rounds", type=int, default=3, help="rounds of collect_env and accelerate env (3)"
    )
    parser.add_argument("--init-rounds", type=int, default=5, help="rounds of the init sides (5)")


def _gpu_count() -> int:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    done = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    return sum(line.startswith("GPU ") for line in done.stdout.splitlines())


def _rows(runs: dict[str, list[ChildRun]]) -> dict[str, dict[str, float]]:
    return {
        name: {
            "median_s": statistics.median(r.seconds for r in found),
            "peak_rss_mib": statistics.median(r.peak_rss for r in found) / 2**20,
        }
        for name, found in runs.items()
    }


def _commands(rounds: int, heavy_rounds: int) -> dict[str, dict[str, float]]:
    python = sys.executable
    quick = {
        PASS: [python, "-c", "pass"],
        SMI: ["nvidia-smi", "-L"],
        SELECT: [python, "-c", "import accelbackends; accelbackends.select()"],
        INFO: [python, "-m", "accelbackends", "info", "--json"],
    }
    say(f"gpu: cold commands, 1 warm-up + {rounds} rounds")
    rows = _rows(interleaved(quick, repeats=rounds, env=clean_env()))
    heavy = {COLLECT_ENV: [python, "-m", "torch.utils.collect_env"]}
    accelerate = shutil.which("accelerate") or _beside_python("accelerate")
    if accelerate:
        heavy[ACCELERATE_ENV] = [accelerate, "env"]
    say(f"gpu: {', '.join(heavy)}, 1 warm-up + {heavy_rounds} rounds")
    rows.update(_rows(interleaved(heavy, repeats=heavy_rounds, env=clean_env())))
    return rows


def _beside_python(name: str) -> str | None:
    candidate = os.path.join(os.path.dirname(sys.executable), name)
    return candidate if os.access(candidate, os.X_OK) else None


def _init_job(side: str, ranks: int) -> dict[str, float]:
    """One job of ``ranks`` ranks on ``side``; the slowest rank's clocks."""
    port = _ranks.free_port()
    children = []
    for rank in range(ranks):
        env = clean_env(
            RANK=str(rank),
            WORLD_SIZE=str(ranks),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(ranks),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        children.append(
            subprocess.Popen(
                [sys.executable, "-c", _RANK, side, str(ALL_REDUCE_BYTES)],
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    clocks = []
    for child in children:
        out, err = child.communicate(timeout=300)
        if child.returncode != 0:
            raise RuntimeError(f"{side} rank exited with {child.returncode}:\n{err[-2000:]}")
        clocks.append(json.loads(out.strip().splitlines()[-1]))
    return {key: max(c[key] for c in clocks) for key in clocks[0]}


def _init(rounds: int, counts: Sequence[int]) -> dict[int, dict[str, dict[str, float]]]:
    keys = {HAND_LAZY: "lazy", HAND_EAGER: "eager", OURS: "ours"}
    results: dict[int, dict[str, dict[str, float]]] = {}
    for count in counts:
        say(f"gpu: init on NCCL at {count} rank(s), 1 warm-up + {rounds} rounds")
        times: dict[str, list[dict[str, float]]] = {side: [] for side in INIT_SIDES}
        for round_index in range(rounds + 1):
            shift = round_index % len(INIT_SIDES)
            for side in INIT_SIDES[shift:] + INIT_SIDES[:shift]:
                clocks = _init_job(keys[side], count)
                if round_index:
                    times[side].append(clocks)
        results[count] = {
            side: {key: statistics.median(c[key] for c in found) for key in found[0]}
            for side, found in times.items()
        }
    return results


def _ratio_goal(name: str, value: float, reference: float, goal: float, *, at_most: bool) -> Goal:
    ratio = value / reference
    met = ratio <= goal if at_most else ratio >= goal
    return Goal(
        name,
        f"{ratio:.1f}x ({ms(value)} vs {ms(reference)})",
        f"{'<=' if at_most else '>='} {goal:g}x",
        met,
    )


def main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    gpus = _gpu_count()
    if not gpus:
        say("gpu: no NVIDIA GPU here (nvidia-smi -L lists none); this benchmark needs one")
        return 2
    rounds, heavy_rounds, init_rounds = (
        (3, 1, 2) if args.quick else (args.rounds, args.heavy_rounds, args.init_rounds)
    )
    commands = _commands(rounds, heavy_rounds)
    counts = [n for n in (1, 2, 4, 8) if n <= gpus]
    init = _init(init_rounds, counts)

    goals: list[Goal] = []
    bare = commands[PASS]
    info = commands[INFO]
    goals.append(
        _ratio_goal(
            "info --json vs python -c pass",
            info["median_s"],
            bare["median_s"],
            INFO_GOAL,
            at_most=True,
        )
    )
    goals.append(
        Goal(
            "info --json peak memory vs python -c pass",
            f"{info['peak_rss_mib'] / bare['peak_rss_mib']:.1f}x "
            f"({mib(info['peak_rss_mib'] * 2**20)} vs {mib(bare['peak_rss_mib'] * 2**20)})",
            f"<= {RSS_GOAL:g}x",
            info["peak_rss_mib"] <= RSS_GOAL * bare["peak_rss_mib"],
        )
    )
    for reference, goal in ((ACCELERATE_ENV, ACCELERATE_GOAL), (COLLECT_ENV, COLLECT_GOAL)):
        if reference in commands:
            goals.append(
                _ratio_goal(
                    f"{reference} vs info --json",
                    commands[reference]["median_s"],
                    info["median_s"],
                    goal,
                    at_most=False,
                )
            )
    for count, sides in init.items():
        hand, ours = sides[HAND_LAZY]["ready"], sides[OURS]["ready"]
        extra = ours - hand
        goals.append(
            Goal(
                f"init() to first result, {count} rank(s), vs hand-written lazy",
                f"{extra * 1e3:+.0f} ms ({extra / hand:+.1%}: {ms(ours)} vs {ms(hand)})",
                f"<= +{INIT_GOAL:.0%}",
                extra <= INIT_GOAL * hand,
            )
        )

    say("")
    say(
        table(
            ["command", "median", "x python -c pass", "peak RSS"],
            [
                [
                    name,
                    ms(row["median_s"]),
                    f"{row['median_s'] / bare['median_s']:.1f}",
                    mib(row["peak_rss_mib"] * 2**20),
                ]
                for name, row in commands.items()
            ],
        )
    )
    for count, sides in init.items():
        say("")
        say(f"one-rank NCCL init, {count} rank(s), medians of {init_rounds}:")
        say(
            table(
                ["side", "init", "first all_reduce (4 MiB)", "init -> first result", "destroy"],
                [
                    [side, ms(c["init"]), ms(c["first"]), ms(c["ready"]), ms(c["destroy"])]
                    for side, c in sides.items()
                ],
            )
        )
    torch_facts = _torch_facts()
    write_results(
        args.out,
        "gpu",
        goals,
        started,
        gpus=gpus,
        commands=commands,
        init={str(k): v for k, v in init.items()},
        rounds=rounds,
        init_rounds=init_rounds,
        **torch_facts,
    )
    report("gpu", goals, args.out)
    return 0


def _torch_facts() -> dict[str, Any]:
    code = (
        "import json, torch; print(json.dumps({'gpu': torch.cuda.get_device_name(0), "
        "'torch_build': torch.__version__, 'cuda': torch.version.cuda, "
        "'nccl': '.'.join(map(str, torch.cuda.nccl.version()))}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    try:
        facts: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"torch_error": done.stderr[-500:]}
    return facts
