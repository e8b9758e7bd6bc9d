"""Time to know the accelerator and backend, cold process: accelbackends vs import torch and peers.

Every command runs as a fresh process, in rounds whose order rotates (so load drift hits all
alike), after one warm-up round; the figures are medians of wall time and of the child's peak
resident memory (from ``wait4``). ``accelbackends info --json`` answers the whole question
(plugins, detection, selection, cluster) without importing torch; the reference is what every
framework pays first, ``python -c "import torch"``. The peers run in their own environment
(``python -m benchmarks peers`` builds it; ``--no-peers`` leaves them out).

Goals: ``info --json`` and ``select()`` at most 6x ``python -c pass`` and at least 25x faster
than ``accelerate env``; info >= 10x faster than import torch, peak memory <= 1/5 of it.
Before measuring, the package is byte-compiled and ``info`` runs once: an installed wheel has
its ``.pyc`` files, and the first start after an install fills the installed-package cache
(`accelbackends.plugin.installed`) that every later start reads.

Usage: ``python -m benchmarks detection [--repeats 7] [--no-peers] [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from . import peers
from ._common import (
    ChildRun,
    Goal,
    add_common_arguments,
    clean_env,
    compile_package,
    draw,
    interleaved,
    mib,
    ms,
    report,
    say,
    table,
    write_results,
)

INFO = "accelbackends info --json"
UNCACHED = "accelbackends info --json, cache off"
FLOOR = "python -c 'import <what info needs>'"
#: The modules a warm ``info`` cannot do without, and nothing of accelbackends: the floor
#: under the start-up goal (pluggy and dataclasses bring inspect, ast and dis).
_FLOOR = "import argparse, datetime, json, pathlib, threading, dataclasses, pluggy"
SELECT = "accelbackends.select()"
TORCH = 'python -c "import torch"'
BARE = "python -c pass"
ACCELERATE = "accelerate env"

_SELECT = "import accelbackends as a; s = a.select(); print(s.accelerator, s.backend)"
#: info and select() in a fresh process: at most this many times bare interpreter start-up,
STARTUP_GOAL = 6.0
#: and at least this many times faster than ``accelerate env``.
PEER_GOAL = 25.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, "detection")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds (default 7)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    parser.add_argument(
        "--no-peers", action="store_true", help="leave out the peers (no venv needed)"
    )


def _console_script() -> list[str]:
    script = Path(sys.executable).parent / "accelbackends"
    return [str(script)] if script.exists() else [sys.executable, "-m", "accelbackends"]


def commands(with_peers: bool) -> dict[str, list[str]]:
    found = {
        BARE: [sys.executable, "-c", "pass"],
        INFO: [*_console_script(), "info", "--json"],
        # A relative XDG_CACHE_HOME is to be ignored (XDG), which turns the cache off: every
        # start asks importlib.metadata, as before the cache (plus env's own exec, ~1 ms).
        UNCACHED: ["env", "XDG_CACHE_HOME=off", *_console_script(), "info", "--json"],
        SELECT: [sys.executable, "-c", _SELECT],
        FLOOR: [sys.executable, "-c", _FLOOR],
        TORCH: [sys.executable, "-c", "import torch"],
    }
    if with_peers:
        for peer in peers.available():
            found[peer.name] = peers.argv(peer)
    return found


def prepare() -> None:
    """Make the measured start-ups those of an installed package: byte-compile accelbackends
    (pip does at install; a checkout run with PYTHONDONTWRITEBYTECODE would otherwise compile
    every module in every process) and let one ``info`` fill the installed-package cache, as
    the first run after an install does (the warm-up round runs each command once more)."""
    compile_package()
    subprocess.run([*_console_script(), "info", "--json"], capture_output=True, check=False)


def main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    repeats, warmup = (2, 1) if args.quick else (args.repeats, args.warmup)
    with_peers = not args.no_peers
    if with_peers:
        peers.setup()
        if not peers.available():
            say("the peers' environment could not be built; measuring without the peers")
    cmds = commands(with_peers)
    prepare()
    say(f"detection: {len(cmds)} commands, {warmup} warm-up + {repeats} timed rounds")
    runs = interleaved(cmds, repeats=repeats, warmup=warmup, env=clean_env(), progress=say)

    def median_s(name: str) -> float:
        return statistics.median(r.seconds for r in runs[name])

    def median_rss(name: str) -> float:
        return statistics.median(r.peak_rss for r in runs[name])

    info_s, info_rss = median_s(INFO), median_rss(INFO)
    rows = []
    for name in sorted(cmds, key=median_s):
        rows.append(
            [
                name,
                ms(median_s(name)),
                mib(median_rss(name)),
                f"{median_s(name) / info_s:.1f}x",
                f"{median_rss(name) / info_rss:.1f}x",
            ]
        )
    say("")
    say(table(["command", "median time", "peak RSS", "time / info", "memory / info"], rows))

    bare_s = median_s(BARE)
    speed = median_s(TORCH) / info_s
    memory = median_rss(INFO) / median_rss(TORCH)
    goals = []
    for name in (INFO, SELECT):
        startup = median_s(name) / bare_s
        goals.append(
            Goal(
                f"{name} vs python -c pass",
                f"{startup:.1f}x ({ms(median_s(name))} vs {ms(bare_s)})",
                f"<= {STARTUP_GOAL:g}x",
                startup <= STARTUP_GOAL,
            )
        )
    saved = median_s(UNCACHED) - info_s
    goals.append(
        Goal(
            "installed-package cache: info --json with it vs without",
            f"{ms(info_s)} vs {ms(median_s(UNCACHED))} ({saved * 1e3:+.1f} ms saved, "
            f"{saved / bare_s:.1f}x python -c pass)",
            "keep only if it saves time",
            saved > 0,
        )
    )
    floor = median_s(FLOOR) / bare_s
    goals.append(
        Goal(
            "the modules info needs, without accelbackends, vs python -c pass",
            f"{floor:.1f}x ({ms(median_s(FLOOR))})",
            "the floor under the start-up goal",
            None,
        )
    )
    goals += [
        Goal(
            "info --json vs import torch: speed",
            f"{speed:.1f}x faster ({ms(info_s)} vs {ms(median_s(TORCH))})",
            ">= 10x",
            speed >= 10,
        ),
        Goal(
            "info --json vs import torch: peak memory",
            f"{memory:.3f} ({mib(info_rss)} vs {mib(median_rss(TORCH))})",
            "<= 0.2",
            memory <= 0.2,
        ),
    ]
    for name in (INFO, SELECT):
        if ACCELERATE in runs:
            faster = median_s(ACCELERATE) / median_s(name)
            goals.append(
                Goal(
                    f"{name} vs accelerate env",
                    f"{faster:.1f}x faster ({ms(median_s(name))} vs {ms(median_s(ACCELERATE))})",
                    f">= {PEER_GOAL:g}x",
                    faster >= PEER_GOAL,
                )
            )
        else:
            goals.append(
                Goal(f"{name} vs accelerate env", "not measured", f">= {PEER_GOAL:g}x", None)
            )

    chart = draw(
        "bars",
        {
            "title": "Time to know the accelerator and backend (cold process, median)",
            "rows": [
                {
                    "label": name,
                    "seconds": median_s(name),
                    "peak_mib": median_rss(name) / 2**20,
                    "highlight": name in (INFO, SELECT, UNCACHED),
                }
                for name in sorted(cmds, key=median_s)
                if name != BARE
            ],
        },
        args.out.with_name("detection.png"),
    )
    write_results(
        args.out,
        "detection",
        goals,
        started,
        repeats=repeats,
        warmup=warmup,
        peers=peers.state() if with_peers else {},
        chart=str(chart) if chart else None,
        commands={
            name: {
                "seconds": _stats(runs[name], "seconds"),
                "peak_rss_bytes": _stats(runs[name], "peak_rss"),
                "runs": [[r.seconds, r.peak_rss] for r in runs[name]],
            }
            for name in cmds
        },
    )
    report("detection", goals, args.out)
    return 0


def _stats(runs: list[ChildRun], field: str) -> dict[str, float]:
    from ._common import summary

    return summary([float(getattr(r, field)) for r in runs])
