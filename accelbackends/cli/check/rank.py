"""One rank's whole run: steps 2 to 4 under the watchdog, then the report that rank 0 prints."""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING, Any

from ...plugin.errors import first_line
from ..text import plural
from .agree import max_over_ranks
from .compat import backend_library_version, default_store
from .correctness import run_checks
from .heartbeat import Heartbeat
from .links import measure_links
from .progress import Progress
from .report import link_lines, print_json, versions
from .results import Result
from .session import Session, control_group, pid_space
from .sweep import copy_alone, sweep
from .verdicts import empty_verdict, judge
from .watchdog import Watchdog

if TYPE_CHECKING:
    from ...plugin.types import Context
    from .bandwidth import Measurement
    from .devicecopy import CopyMeasurement
    from .options import Options

__all__ = ["run_rank"]


def run_rank(ctx: Context, options: Options, started: float, init_span: str) -> dict[str, Any]:
    """One rank's whole run. Returns the report, the same on every rank; rank 0 prints it.

    ``started`` is the wall-clock time the run began; ``init_span`` names what the init time
    covers before detection (``"start, "`` where the ranks were started for this run).
    """
    progress = Progress(options.progress, enabled=ctx.rank == 0)
    progress.update(**_header(ctx, options, started))
    heartbeat = Heartbeat(default_store(), ctx.rank, ctx.world_size)

    def expired(message: str) -> None:
        progress.update(ok=False, error=message)
        if heartbeat.silent():
            progress.update(stalled=message)
        if options.json and options.progress is None:
            # Under a launcher rank 0 is the reporting process: the JSON comes now or never.
            print_json(progress.report)

    watchdog = Watchdog(
        ctx.rank,
        options.timeout,
        explain=heartbeat.explain,
        on_expire=expired,
        announce=not (ctx.rank == 0 and options.progress),
    )
    try:
        with watchdog.step("creating the control group"):
            session = Session(
                ctx, options, control_group(ctx, options.timeout), watchdog, heartbeat, progress
            )
        with watchdog.step("measuring the time to initialise"):
            init_seconds = max_over_ranks(ctx, session.control, [time.time() - started])[0]
        with watchdog.step("gathering the ranks' hosts and devices"):
            ranks = session.gather_objects(_whoami(ctx), "hosts and devices")
        # Where each rank's process can be looked for when contact is lost; not in the report.
        session.peers = {r["rank"]: (r["host"], r["pid"], r.pop("pid_space")) for r in ranks}
        progress.update(
            init_seconds=round(init_seconds, 4),
            hosts=sorted({r["host"] for r in ranks}),
            ranks=ranks,
        )
        session.say(
            f"[2/4] init: {ctx.world_size} {plural(ctx.world_size, 'rank')} ready in "
            f"{init_seconds:.2f} s ({init_span}detect, select, bind, rendezvous, "
            "init_process_group; slowest rank)"
        )
        for entry in ranks:  # one line per rank, as nccl-tests prints them
            session.say(
                f"      rank {entry['rank']}: host {entry['host']}, device {entry['device']}, "
                f"local rank {entry['local_rank']}, pid {entry['pid']}"
            )
        checks = run_checks(session)
        progress.update(checks=[c.as_json() for c in checks])
        copied: CopyMeasurement | None = None
        bandwidth: list[Measurement] = []
        if ctx.world_size == 1:
            copied, problems = copy_alone(session)
        else:
            bandwidth, problems = sweep(session)
        links, culprits, why_not = measure_links(session, [r["host"] for r in ranks])
        for line in link_lines(links, why_not):
            session.say("      " + line)
        if why_not.startswith("not run"):
            problems.append(Result("links", "not run", why_not))
        elif why_not.startswith("not supported"):
            problems.append(Result("links", "skipped", why_not))
        checks += session.gather(problems, "bandwidth")
    except BaseException as exc:
        progress.update(ok=False, error=first_line(exc))
        if heartbeat.silent():
            # Whom to blame: the rank that went silent, not this one that waited for it.
            progress.update(stalled=heartbeat.explain())
        if ctx.rank == 0:
            # Under a launcher this process prints the JSON: the checks that passed stay in it.
            exc.report_so_far = progress.report  # type: ignore[attr-defined]
        raise
    finally:
        heartbeat.stop()
        watchdog.stop()
    report = _header(ctx, options, started) | {
        "error": None,
        "init_seconds": round(init_seconds, 4),
        "hosts": sorted({r["host"] for r in ranks}),
        "ranks": ranks,
        "checks": [c.as_json() for c in checks],
        "bandwidth": [m.as_json() for m in bandwidth],
        "device_copy": copied.as_json() if copied else None,
        "links": links,
    }
    report |= judge(report, options.limits(), culprits)
    report["ok"] = report["verdict"] == "PASSED"
    if progress.report.get("text"):
        report["text"] = progress.report["text"]  # --quick's held lines; never in the JSON
    return report


def _header(ctx: Context, options: Options, started: float) -> dict[str, Any]:
    """The keys that make stored reports comparable: what ran where, with which versions."""
    from datetime import datetime, timezone

    return {
        "verdict": "FAILED",  # until the end; first, as the text report puts it first
        "ok": False,
        "error": None,
        "timestamp": datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="seconds"),
        "world_size": ctx.world_size,
        "local_world_size": ctx.local_world_size,
        "accelerator": ctx.accelerator,
        "backend": ctx.backend,
        "reason": ctx.reason,
        "launcher": ctx.launcher,
        "cpu_affinity": ctx.cpu_affinity,
        "init_seconds": None,
        "timeout": options.timeout,
        "versions": versions() | {ctx.backend: backend_library_version(ctx.backend)},
        "hosts": [],
        "ranks": [],
        "checks": [],
        "bandwidth": [],
        "device_copy": None,
    } | empty_verdict()


def _whoami(ctx: Context) -> dict[str, Any]:
    """This rank's line in the report, as in nccl-tests' per-rank list."""
    import os

    return {
        "rank": ctx.rank,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "local_rank": ctx.local_rank,
        "device": str(ctx.device),
        "pid_space": pid_space(),
    }
