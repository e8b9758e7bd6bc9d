"""``accelbackends check`` itself: validate the flags and the selection, start the ranks
(standalone) or join the ranks a launcher started, print the report, return the exit code."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...plugin.errors import (
    EXIT_FAILED,
    EXIT_OK,
    AccelBackendsError,
    ConfigError,
    SpawnError,
    first_line,
)
from ..text import plural, say
from .options import (
    Options,
    check_memory,
    check_one_rank,
    check_ranks,
    oversubscription,
    parse_options,
    with_rules,
)
from .progress import read_progress
from .rank import run_rank
from .report import environment, failure_report, plot, print_json, verdict
from .thresholds import Floor
from .verdicts import Culprit

if TYPE_CHECKING:
    from ...plugin.types import ClusterInfo, Selection

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """``accelbackends check``; returns the exit code, raises errors for the CLI to report."""
    from ...job.recognise import recognise
    from ...job.select import select
    from ...registry.facade import default_registry, warn_unknown_variables

    registry = default_registry()
    options = parse_options(args, registry.env)
    warn_unknown_variables(registry)
    _refuse_what_info_refuses(registry.env)
    # The whole selection is validated here, before any rank starts: a wrong override is exit 2
    # with one line, not one traceback per rank.
    selection = select(registry=registry)
    cluster = recognise(registry)
    options = with_rules(options, selection.status.plugin, selection.spec.thresholds)
    device_type = selection.spec.device_type
    if cluster.launcher != "single":
        if args.nproc is not None:
            raise ConfigError(
                f"--nproc={args.nproc} cannot be used under {cluster.launcher}, which started "
                f"{cluster.world_size} {plural(cluster.world_size, 'rank')}; the launcher "
                "decides how many ranks run"
                + (
                    f" (torchrun --nproc-per-node {args.nproc} -m accelbackends check)"
                    if cluster.launcher == "torchrun"
                    else ""
                )
            )
        options = _held_to(options, selection, cluster.world_size)
        check_memory(options, device_type, cluster.local_world_size)
        return _join_launcher(options, selection, cluster)
    nproc = args.nproc or _default_nproc(selection)
    check_ranks(nproc)
    options = _held_to(options, selection, nproc)
    check_memory(options, device_type, nproc)
    crowded = oversubscription(nproc, device_type)
    if crowded is not None and not options.json:
        say(crowded)
    return _standalone(options, selection, nproc)


def _held_to(options: Options, selection: Selection, world_size: int) -> Options:
    """The options with the bandwidth floor the plugin declares for its fabric, where the user
    set none and there is a collective bandwidth to hold to it (two ranks or more)."""
    options = check_one_rank(options, world_size)
    expected = selection.spec.expected_busbw_gbps
    if expected and not options.min_busbw and world_size > 1:
        source = f"the {selection.status.plugin} plugin's expected busbw"
        options = dataclasses.replace(options, min_busbw=(Floor(None, float(expected), source),))
    return options


def _refuse_what_info_refuses(env: Mapping[str, str]) -> None:
    """The variables ``info`` calls bad input are bad input here too (exit 2), also where this
    check would not read them: a standalone check uses no secret (its ranks meet on a private
    local socket), but the user's first job of more than one rank would fail on it."""
    from ...plugin import config
    from ...rendezvous import secret

    problems = config.validate(env)
    if problems:
        raise ConfigError(next(iter(problems.values())))
    secret.secret_source(env)


def _default_nproc(selection: Selection) -> int:
    if selection.spec.device_type == "cpu":
        return 2
    return max(1, selection.status.detection.device_count)


def _standalone(options: Options, selection: Selection, nproc: int) -> int:
    from ...job.spawn import spawn

    held = _say_or_hold([environment(selection, nproc, nproc, "spawn")], options)
    sys.stdout.flush()  # the ranks are forked: anything still buffered would be printed twice
    started = time.time()
    from ...job.processes import private_temp_file

    progress = private_temp_file("check", ".json")
    options = dataclasses.replace(options, progress=progress)
    try:
        results = spawn(
            run_rank,
            nproc,
            args=(options, started, "start, "),
            timeout=options.timeout,
            rendezvous_timeout=options.rendezvous_timeout,
        )
    except SpawnError as exc:
        so_far = read_progress(progress)
        # Rank 0 names a rank that stopped answering; otherwise spawn() names the rank that
        # failed first (rank 0's own error would blame the survivor).
        stalled = so_far.get("stalled") if exc.rank == 0 else None  # a rank failing first wins
        error = stalled or _death_first(exc)
        base = {
            "world_size": nproc,
            "accelerator": selection.accelerator,
            "backend": selection.backend,
            "launcher": "spawn",
        }
        if not options.json:
            _say_all([*held, *so_far.get("text", [])])
        report = failure_report(error, base | so_far)
        if exc.death and not stalled:
            report["culprits"] = [_dead_rank(exc, report["ranks"]).as_json()]
        # Every rank ran here: whatever failed, this node did not pass.
        report["failing_nodes"] = sorted(report["hosts"])
        _write_nodes(report, options)
        if options.json:
            print_json(report)
        raise AccelBackendsError(error) from exc
    finally:
        with contextlib.suppress(OSError):
            os.remove(progress)
    return _finish(results[0], options, held)


def _death_first(exc: SpawnError) -> str:
    """spawn()'s error on one line: a rank's death first, with how it died, then each other
    rank's "lost contact" as its consequence."""
    return "; ".join(
        [
            first_line(exc),
            *(f"{text} — a consequence of rank {exc.rank}'s death" for _, text in exc.consequences),
        ]
    )


def _dead_rank(exc: SpawnError, ranks: list[dict[str, Any]]) -> Culprit:
    """The culprit for a rank that died: its host and process id where the ranks had said them
    (all ranks of a standalone run are on this host), and its last stderr lines."""
    import socket

    entry = next((r for r in ranks if r.get("rank") == exc.rank), {})
    pid = f" (pid {entry['pid']})" if "pid" in entry else ""
    host = str(entry.get("host") or socket.gethostname())
    said = f"; its last stderr lines: {' | '.join(exc.last_stderr)}" if exc.last_stderr else ""
    return Culprit(
        "rank", (host,), (exc.rank,), f"{exc.death} without reporting a result{pid}{said}"
    )


def _ended_rank(entry: tuple[int, int, str]) -> Culprit:
    import socket

    rank, pid, state = entry
    return Culprit(
        "rank",
        (socket.gethostname(),),
        (rank,),
        f"{state} (pid {pid} on this host); its launcher has its exit status",
    )


def _join_launcher(options: Options, selection: Selection, cluster: ClusterInfo) -> int:
    from ...job.lifecycle import distributed

    held = []
    if cluster.rank == 0:
        line = environment(
            selection, cluster.world_size, cluster.local_world_size, cluster.launcher
        )
        held = _say_or_hold([line], options)
    started = time.time()
    with distributed(timeout=options.timeout, rendezvous_timeout=options.rendezvous_timeout) as ctx:
        try:
            report = run_rank(ctx, options, started, "")
        except AccelBackendsError as exc:
            if ctx.rank == 0:
                so_far = _last_progress(exc)
                if not options.json:
                    _say_all([*held, *so_far.get("text", [])])
                report = failure_report(first_line(exc), so_far)
                # A rank seen to end on this host is the culprit (its exit status is the
                # launcher's); otherwise which node is at fault is not known here.
                ended = getattr(exc, "ended_peers", [])
                report["culprits"] = [_ended_rank(entry).as_json() for entry in ended]
                report["failing_nodes"] = sorted({c["hosts"][0] for c in report["culprits"]})
                _write_nodes(report, options)
                if options.json:
                    print_json(report)
            raise
    if ctx.rank != 0:
        return _exit_code(report)
    return _finish(report, options, held)


def _say_or_hold(lines: list[str], options: Options) -> list[str]:
    """Print ``lines`` now, or with ``--quick`` return them to print after the verdict."""
    if options.json:
        return []
    if options.quick:
        return lines
    _say_all(lines)
    return []


def _say_all(lines: list[str]) -> None:
    for line in lines:
        say(line)


def _finish(report: dict[str, Any], options: Options, held: list[str]) -> int:
    text = report.pop("text", [])
    if options.plot:
        plot(Path(options.plot), report, options.min_busbw, options.baseline)
    _write_nodes(report, options)
    if options.json:
        print_json(report)
        return _exit_code(report)
    say(verdict(report))
    _say_all([*held, *text])  # --quick: a preflight's log opens with its verdict, steps follow
    if options.plot:
        say(f"plot: busbw against size written to {options.plot}")
    return _exit_code(report)


def _write_nodes(report: dict[str, Any], options: Options) -> None:
    """``--failing-nodes`` and ``--passing-nodes``: one host per line (an empty file for an
    empty list, so that a script never reads an earlier run's list)."""
    for target, key in (
        (options.failing_nodes, "failing_nodes"),
        (options.passing_nodes, "passing_nodes"),
    ):
        if target is not None:
            Path(target).write_text("".join(f"{host}\n" for host in report[key]), encoding="utf-8")


def _last_progress(exc: BaseException) -> dict[str, Any]:
    return getattr(exc, "report_so_far", None) or {}


def _exit_code(report: dict[str, Any]) -> int:
    return EXIT_OK if report["ok"] else EXIT_FAILED
