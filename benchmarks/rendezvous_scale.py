"""Init time vs ranks, up to 32 Gloo ranks: accelbackends.spawn() vs the hand-written way.

For each rank count, rounds run every side once in rotating order (after a warm-up round):
the hand-written job (``torch.multiprocessing``, ``env://`` TCP store hosted by rank 0), a
job through ``accelbackends.spawn()`` whose ranks each load plugins and detect, and the same
with ``accelbackends.select()`` called in the parent first, so the forked ranks inherit its
detection. Each job's time is from the launch until every rank has initialised (see
:mod:`benchmarks._ranks`); every job ends with one checked all_reduce.

Goals: 32 ranks initialise and all_reduce through spawn()/init(); at 16 ranks and more, p50 and
p95 no worse than the hand-written job.

Usage: ``python -m benchmarks rendezvous-scale [--ranks 2,4,8,16,32] [--repeats 9] [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

from . import _ranks
from ._common import (
    Goal,
    add_common_arguments,
    draw,
    ms,
    percentile,
    rank_counts,
    report,
    say,
    summary,
    table,
    write_results,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, "rendezvous_scale")
    parser.add_argument(
        "--ranks", type=rank_counts, default=[2, 4, 8, 16, 32], help="default 2,4,8,16,32"
    )
    parser.add_argument("--repeats", type=int, default=9, help="timed rounds per count (9)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")


def main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    counts, repeats, warmup = args.ranks, args.repeats, args.warmup
    if args.quick:
        counts, repeats, warmup = [c for c in counts if c in (2, 8, 32)] or counts, 2, 0
    _ranks.prepare()
    sides = list(_ranks.RUNNERS)
    timings: dict[int, dict[str, list[_ranks.RunTiming]]] = {}
    say(f"rendezvous-scale: ranks {counts}, {warmup} warm-up + {repeats} rounds of {sides}")
    for count in counts:
        timings[count] = {side: [] for side in sides}
        for round_index in range(warmup + repeats):
            shift = round_index % len(sides)
            for side in sides[shift:] + sides[:shift]:
                timing = _ranks.RUNNERS[side](count)
                if round_index >= warmup:
                    timings[count][side].append(timing)
        medians = {s: statistics.median(t.init for t in timings[count][s]) for s in sides}
        say(f"  {count:>2} ranks: " + ", ".join(f"{s} {ms(m)}" for s, m in medians.items()))

    def init_times(count: int, side: str) -> list[float]:
        return [t.init for t in timings[count][side]]

    rows = []
    for count in counts:
        hand = statistics.median(init_times(count, _ranks.HANDWRITTEN))
        row = [str(count)]
        for side in sides:
            values = init_times(count, side)
            median = statistics.median(values)
            row += [f"{ms(median)} (max {ms(max(values))})"]
            if side != _ranks.HANDWRITTEN:
                row[-1] += f" {median / hand:.2f}x"
        rows.append(row)
    say("")
    say("median time from launch until every rank initialised (x: relative to hand-written)")
    say(table(["ranks", *sides], rows))

    top = max(counts)
    hand_top = statistics.median(init_times(top, _ranks.HANDWRITTEN))
    ours_top = statistics.median(init_times(top, _ranks.OURS))
    pre_top = statistics.median(init_times(top, _ranks.PRESELECTED))
    goals = [
        Goal(
            f"{top} ranks through spawn()/init() vs hand-written",
            f"all {len(init_times(top, _ranks.OURS))} runs ok; median {ms(ours_top)} vs "
            f"{ms(hand_top)} ({ours_top / hand_top:.2f}x); select() first: {ms(pre_top)} "
            f"({pre_top / hand_top:.2f}x)",
            "initialise + all_reduce; report",
            None,
            detail=f"max {ms(max(init_times(top, _ranks.OURS)))} vs "
            f"{ms(max(init_times(top, _ranks.HANDWRITTEN)))}",
        )
    ]
    for count in [c for c in counts if c >= 16]:
        hand_values = init_times(count, _ranks.HANDWRITTEN)
        ours_values = init_times(count, _ranks.OURS)
        hand_p = (statistics.median(hand_values), percentile(hand_values, 95))
        ours_p = (statistics.median(ours_values), percentile(ours_values, 95))
        goals.append(
            Goal(
                f"{count} ranks through spawn(): p50 / p95 vs hand-written",
                f"{ms(ours_p[0])} / {ms(ours_p[1])} vs {ms(hand_p[0])} / {ms(hand_p[1])}",
                "no worse",
                ours_p[0] <= hand_p[0] and ours_p[1] <= hand_p[1],
                detail=f"{len(ours_values)} jobs each",
            )
        )
    chart = draw(
        "lines",
        {
            "title": "Launch to every rank initialised (Gloo, median; band: min to max)",
            "xlabel": "ranks (all on this 2-core machine)",
            "ylabel": "seconds",
            "series": [
                {
                    "label": side,
                    "x": counts,
                    "median": [statistics.median(init_times(c, side)) for c in counts],
                    "low": [min(init_times(c, side)) for c in counts],
                    "high": [max(init_times(c, side)) for c in counts],
                }
                for side in sides
            ],
        },
        args.out.with_name("init_vs_ranks.png"),
    )
    write_results(
        args.out,
        "rendezvous-scale",
        goals,
        started,
        repeats=repeats,
        warmup=warmup,
        chart=str(chart) if chart else None,
        ranks={
            str(count): {
                side: {
                    "init": summary([t.init for t in found]),
                    "ready": summary([t.ready for t in found]),
                    "wall": summary([t.wall for t in found]),
                    "runs": [[t.init, t.ready, t.wall] for t in found],
                }
                for side, found in timings[count].items()
            }
            for count in counts
        },
    )
    report("rendezvous-scale", goals, args.out)
    return 0
