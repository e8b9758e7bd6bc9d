"""One rank's whole run: steps 2 to 4 under the watchdog, then the report that rank 0 prints."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..plugin.text import plural
from .agree import max_over_ranks
from .correctness import run_checks
from .session import Session, control_group
from .sweep import sweep
from .watchdog import Watchdog

if TYPE_CHECKING:
    from ..plugin.types import Context
    from .options import Options

__all__ = ["run_rank"]


def run_rank(ctx: Context, options: Options, started: float, init_span: str) -> dict[str, Any]:
    """One rank's whole run. Returns the report, the same on every rank; rank 0 prints it.

    ``started`` is the wall-clock time the run began; ``init_span`` names what the init time
    covers before detection (``"start, "`` where the ranks were started for this run).
    """
    watchdog = Watchdog(ctx.rank, options.timeout)
    try:
        with watchdog.step("creating the control group"):
            session = Session(ctx, options, control_group(ctx, options.timeout), watchdog)
        with watchdog.step("measuring the time to initialise"):
            init_seconds = max_over_ranks(ctx, session.control, [time.time() - started])[0]
        session.say(
            f"[2/4] init: {ctx.world_size} {plural(ctx.world_size, 'rank')} ready in "
            f"{init_seconds:.2f} s ({init_span}detect, select, bind, rendezvous, "
            "init_process_group; slowest rank)"
        )
        checks = run_checks(session)
        bandwidth, problems = sweep(session)
        checks += session.gather(problems, "bandwidth")
    finally:
        watchdog.stop()
    return {
        "ok": all(c.status in ("passed", "skipped") for c in checks),
        "world_size": ctx.world_size,
        "local_world_size": ctx.local_world_size,
        "accelerator": ctx.accelerator,
        "backend": ctx.backend,
        "reason": ctx.reason,
        "launcher": ctx.launcher,
        "cpu_affinity": ctx.cpu_affinity,
        "init_seconds": round(init_seconds, 4),
        "timeout": options.timeout,
        "checks": [c.as_json() for c in checks],
        "bandwidth": [m.as_json() for m in bandwidth],
    }
