"""``import accelbackends`` vs bare interpreter start-up, and what the import pulls in.

Cold processes in rotating rounds after a warm-up: ``python -c pass`` against ``python -c
"import accelbackends"``; the goal is the difference of the medians. A separate process lists
what the import loaded: torch, pluggy, ``importlib.metadata`` (which the entry-point scan
needs) and the package's registry must all be absent, and no entry-point scan may have run.

Goal: within 40 ms of bare start-up; imports neither torch nor the entry-point scan.

Usage: ``python -m benchmarks imports [--repeats 15] [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from ._common import (
    ROOT,
    Goal,
    add_common_arguments,
    clean_env,
    interleaved,
    ms,
    report,
    say,
    summary,
    table,
    write_results,
)

GOAL_SECONDS = 0.040
#: Modules whose presence after ``import accelbackends`` means work was done at import time.
HEAVY = ("torch", "pluggy", "importlib.metadata", "accelbackends.registry.facade", "numpy")

# Counts calls of importlib.metadata.entry_points, should anything import it, and lists which
# of HEAVY are loaded after the import.
_PROBE = f"""
import json, sys, time
start = time.perf_counter()
import accelbackends
seconds = time.perf_counter() - start
heavy = [name for name in {HEAVY!r} if name in sys.modules]
own = sorted(name for name in sys.modules if name.startswith("accelbackends"))
print(json.dumps({{"seconds": seconds, "heavy": heavy, "own_modules": own,
                  "modules": len(sys.modules)}}))
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, "imports")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds (default 15)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")


def main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    repeats, warmup = (5, 1) if args.quick else (args.repeats, args.warmup)
    bare, imported = "python -c pass", 'python -c "import accelbackends"'
    commands = {
        bare: [sys.executable, "-c", "pass"],
        imported: [sys.executable, "-c", "import accelbackends"],
    }
    say(f"imports: {warmup} warm-up + {repeats} timed rounds")
    runs = interleaved(commands, repeats=repeats, warmup=warmup, env=clean_env())
    seconds = {name: [r.seconds for r in found] for name, found in runs.items()}
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    extra = medians[imported] - medians[bare]
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=clean_env(),
        check=True,
    )
    loaded = json.loads(probe.stdout)
    say(
        table(
            ["command", "median", "p95", "min"],
            [
                [name, ms(medians[name]), ms(summary(v)["p95"]), ms(min(v))]
                for name, v in seconds.items()
            ],
        )
    )
    say(f"in-process import time: {ms(loaded['seconds'])}; modules loaded: {loaded['modules']}")
    say(f"accelbackends modules after the import: {', '.join(loaded['own_modules'])}")
    goals = [
        Goal(
            "import accelbackends: extra start-up",
            f"+{ms(extra)} ({ms(medians[imported])} vs {ms(medians[bare])})",
            f"<= {GOAL_SECONDS * 1e3:.0f} ms",
            extra <= GOAL_SECONDS,
        ),
        Goal(
            "import accelbackends: nothing heavy",
            "loads " + (", ".join(loaded["heavy"]) or "none of them"),
            "no torch, pluggy, importlib.metadata",
            not loaded["heavy"],
        ),
    ]
    write_results(
        args.out,
        "imports",
        goals,
        started,
        repeats=repeats,
        warmup=warmup,
        seconds={name: summary(v) for name, v in seconds.items()},
        runs=seconds,
        after_import=loaded,
    )
    report("imports", goals, args.out)
    return 0
