"""``python -m benchmarks NAME [options]``: the single entry point of every benchmark.

Each benchmark is a module of this package with a docstring (its first line is the help text),
``add_arguments(parser)`` and ``main(args) -> int``; add one by naming it in ``BENCHMARKS``.
``python -m benchmarks all [--quick]`` runs them all in turn and prints every goal in one table
(also written to ``benchmarks/results/summary.json`` and ``summary.md``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Command name -> module (imported only when that benchmark runs), in the order ``all`` runs
#: them: the cheap single-process ones first, the many-rank ones last.
BENCHMARKS: dict[str, str] = {
    "peers": "benchmarks.peers",
    "imports": "benchmarks.imports",
    "detection": "benchmarks.detection",
    "discovery": "benchmarks.discovery",
    "init-overhead": "benchmarks.init_overhead",
    "rendezvous-scale": "benchmarks.rendezvous_scale",
    "rendezvous-stalls": "benchmarks.rendezvous_stalls",
    "rendezvous-sim": "benchmarks.rendezvous_sim",
    "membership": "benchmarks.membership",
    "local-stores": "benchmarks.local_stores",
    "check-overhead": "benchmarks.check_overhead",
    "cpu-affinity": "benchmarks.cpu_affinity",
    "gpu": "benchmarks.gpu",
}
#: Benchmarks that ``all`` leaves out: ``gpu`` needs an NVIDIA GPU (``.ci/gpu.sh`` runs it).
NOT_IN_ALL = frozenset({"gpu"})

#: Arguments ``all --quick`` gives a benchmark instead of ``--quick``.
QUICK_ARGUMENTS: dict[str, list[str]] = {
    "check-overhead": ["--repeats", "3", "--max-bytes", "4MiB"],
}


def _add_all(commands: Any) -> None:
    parser = commands.add_parser(
        "all",
        help="run every benchmark in turn and print every goal in one table",
        description="Run every benchmark with its defaults (about 10 minutes on 2 cores) "
        "or, with --quick, with few repeats (a smoke run).",
    )
    parser.add_argument("--quick", action="store_true", help="few repeats: a smoke run")
    parser.add_argument(
        "--skip",
        default="",
        metavar="NAMES",
        help="comma-separated benchmarks to leave out (e.g. peers,check-overhead)",
    )


def run_all(quick: bool, skip: set[str]) -> int:
    from ._common import RESULTS, Goal, load_average, machine, markdown_table, say, table

    unknown = skip - set(BENCHMARKS)
    if unknown:
        say(f"unknown benchmark(s) in --skip: {', '.join(sorted(unknown))}")
        return 2
    started = time.monotonic()
    load_before = load_average()
    rows: list[list[str]] = []
    failed: list[str] = []
    for name, module_name in BENCHMARKS.items():
        if name in skip or name in NOT_IN_ALL:
            continue
        module = importlib.import_module(module_name)
        parser = argparse.ArgumentParser(prog=f"benchmarks {name}")
        module.add_arguments(parser)
        argv = QUICK_ARGUMENTS.get(name, ["--quick"]) if quick else []
        if name == "detection" and "peers" in skip:
            argv.append("--no-peers")
        args = parser.parse_args(argv)
        say(f"\n=== {name} {' '.join(argv)}".rstrip())
        began = time.monotonic()
        try:
            code = module.main(args)
        except Exception:
            traceback.print_exc()
            code = 1
        if code != 0:
            failed.append(name)
        out: Path = args.out
        if out.exists() and out.stat().st_mtime >= time.time() - (time.monotonic() - began) - 1:
            for goal in json.loads(out.read_text()).get("goals", []):
                goal = Goal(**goal)
                rows.append([name, goal.name, goal.measured, goal.target, goal.verdict])
        else:
            rows.append([name, "(no results)", "", "", "FAILED"])
        if name == "check-overhead" and out.exists():
            result = json.loads(out.read_text())
            met = result.get("goal_met")
            ratio = result.get("median_ratio_from_1_mib")
            lowest, noise = (
                result.get("lowest_ratio_from_1_mib"),
                result.get("largest_self_noise_from_1_mib"),
            )
            measured = "-"
            if ratio is not None and lowest is not None and noise is not None:
                measured = (
                    f"median ratio {ratio:.3f}, lowest {lowest:.3f}; the hand-written loop "
                    f"against itself within {noise:.1%}"
                )
            rows.append(
                [
                    name,
                    "check busbw vs hand-written loop, sizes >= 1 MiB",
                    measured,
                    ">= 0.95 at every size",
                    {True: "met", False: "MISSED", None: "reported"}[met],
                ]
            )
    headers = ["benchmark", "goal", "measured", "target", "verdict"]
    say(f"\n=== all goals ({'quick' if quick else 'full'} run, {time.monotonic() - started:.0f} s)")
    say(table(headers, rows))
    load_after = load_average()
    say(f"load average before: {load_before[0]:.2f}, after: {load_after[0]:.2f} (1 min)")
    summary = {
        "quick": quick,
        "seconds": round(time.monotonic() - started),
        "machine": machine(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "goals": [dict(zip(headers, row, strict=True)) for row in rows],
        "failed": failed,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (RESULTS / "summary.md").write_text(markdown_table(headers, rows) + "\n")
    say("summary written to benchmarks/results/summary.json and summary.md")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Benchmarks of accelbackends, each a ratio against a reference in one run.",
    )
    commands = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for name, module_name in BENCHMARKS.items():
        module = importlib.import_module(module_name)
        summary = (module.__doc__ or name).strip().splitlines()[0]
        module.add_arguments(commands.add_parser(name, help=summary, description=module.__doc__))
    _add_all(commands)
    args = parser.parse_args(argv)
    from ._common import compile_package

    compile_package()
    if args.benchmark == "all":
        skip = {name.strip() for name in args.skip.split(",") if name.strip()}
        return run_all(args.quick, skip)
    result: int = importlib.import_module(BENCHMARKS[args.benchmark]).main(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
