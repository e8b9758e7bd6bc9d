"""What the user reads: the environment line, the correctness grid, the bandwidth table, the
verdict, the JSON object and the plot."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..text import aligned, plural, rank_list, say
from .bandwidth import OPS, Measurement
from .collectives import DTYPES, Check, tolerance_text
from .sizes import format_size

if TYPE_CHECKING:
    from ...plugin.types import Selection
    from .results import Result

__all__ = [
    "environment",
    "failure_report",
    "grid",
    "plot",
    "print_json",
    "table_header",
    "table_row",
    "verdict",
    "versions",
]

#: Whether this process printed its JSON object already (``check --json`` prints exactly one).
_printed = False

_TABLE = "{:<11} {:>9} {:>12} {:>13} {:>13} {:>6}"
_COLUMNS = ("op", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "iters")


def environment(selection: Selection, world_size: int, local_size: int, launcher: str) -> str:
    """Step 1: the accelerator, the backend and why, world and local sizes."""
    nodes = max(1, world_size // max(1, local_size))
    return (
        f"[1/4] environment: {selection.accelerator} with {selection.backend}, {world_size} "
        f"{plural(world_size, 'rank')} ({local_size} per node, {nodes} "
        f"{plural(nodes, 'node')}), launcher {launcher}\n"
        f"      {selection.accelerator}: {selection.reason}; "
        f"{selection.backend}: {selection.backend_reason}"
    )


def grid(checks: list[Check], merged: list[Result], world_size: int) -> Iterator[str]:
    """The correctness step as text: operations x dtypes, then whatever did not pass."""
    by_name = {r.name: r for r in merged}
    word = {"passed": "ok", "skipped": "skipped", "failed": "FAILED", "not run": "not run"}
    rows: list[list[str]] = [["operation", *DTYPES]]
    for row in dict.fromkeys(c.row for c in checks):
        cells = dict.fromkeys(DTYPES, "-")
        for check in (c for c in checks if c.row == row):
            state = word[by_name[check.name].status]
            if check.dtype is None:
                cells = {DTYPES[0]: state} | dict.fromkeys(DTYPES[1:], "")
            else:
                cells[check.dtype] = state
        rows.append([row, *cells.values()])
    yield from aligned(rows)
    yield (
        f"tolerance: float sums and averages {tolerance_text('bfloat16')} for bfloat16, "
        f"2^-24 for float32; everything else exact ({world_size} "
        f"{plural(world_size, 'rank')}); -: avg is not defined for integers"
    )
    rows_of = {c.name: c for c in checks}
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for result in merged:
        if result.status != "passed":
            check = rows_of[result.name]
            key = (result.status, check.row, result.detail)
            grouped.setdefault(key, []).append(check.dtype or "")
    not_run = [k for k in grouped if k[0] == "not run"]
    for status, row, detail in grouped:
        if status != "not run":
            dtypes = ", ".join(d for d in grouped[status, row, detail] if d)
            yield f"{word[status]} {row}{f' ({dtypes})' if dtypes else ''}: {detail}"
    if not_run:
        count = sum(len(grouped[k]) for k in not_run)
        why = not_run[0][2].removeprefix("not run: ")
        yield f"not run: {count} {plural(count, 'check')}, because {why}"


def table_header() -> str:
    """The bandwidth table's header; its rows are `table_row`."""
    return _TABLE.format(*_COLUMNS)


def table_row(measurement: Measurement) -> str:
    return _TABLE.format(*measurement.row())


def verdict(report: dict[str, Any]) -> str:
    """The last line: PASSED with the peak busbw, or FAILED naming the checks and ranks."""
    checks = report["checks"]
    not_run = [c for c in checks if not c["ok"] and c["detail"].startswith("not run")]
    failed = [c for c in checks if not c["ok"] and c not in not_run]
    skipped = [c for c in checks if c["skipped"]]
    passed = len(checks) - len(failed) - len(not_run) - len(skipped)
    where = f"{report['accelerator']} with {report['backend']}, {report['world_size']} ranks"
    counts = f"{passed} passed, {len(failed)} failed, {len(skipped)} skipped"
    if not_run:
        counts += f", {len(not_run)} not run"
    if failed or not_run:
        shown = ", ".join(f"{c['name']} on {rank_list(c['ranks'])}" for c in failed[:4])
        more = f" and {len(failed) - 4} more" if len(failed) > 4 else ""
        return f"verdict: FAILED: {shown or 'checks not run'}{more} ({counts}; {where})"
    peak = max((b["busbw_gbps"] for b in report["bandwidth"]), default=None)
    best = "" if peak is None else f"; peak busbw {peak:.2f} GB/s"
    return f"verdict: PASSED ({counts}; {where}{best})"


def versions() -> dict[str, str | None]:
    """Python, torch, pluggy and accelbackends (the backend's library is added by the rank)."""
    from ..info import versions as info_versions

    return info_versions()


def failure_report(error: str, so_far: dict[str, Any] | None = None) -> dict[str, Any]:
    """What ``--json`` prints when the run could not finish: the keys of a full report, what
    was found before the failure (checks that passed stay), ``ok`` false and the error."""
    import socket
    from datetime import datetime, timezone

    report: dict[str, Any] = {
        "ok": False,
        "error": error,
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "world_size": None,
        "accelerator": None,
        "backend": None,
        "launcher": None,
        "init_seconds": None,
        "versions": versions(),
        "hosts": [socket.gethostname()],
        "ranks": [],
        "checks": [],
        "bandwidth": [],
    }
    report.update({k: v for k, v in (so_far or {}).items() if k not in ("ok", "error", "stalled")})
    return report


def print_json(report: dict[str, Any]) -> None:
    """The one JSON object of ``--json`` (a second call prints nothing)."""
    global _printed
    if _printed:
        return
    _printed = True
    say(json.dumps(report, indent=2), plain=True)


def json_printed() -> bool:
    return _printed


def plot(path: Path, report: dict[str, Any]) -> None:
    """busbw against size, one line per swept operation, into a .png, .svg or .pdf file."""
    from matplotlib.figure import Figure  # type: ignore[import-not-found,unused-ignore]

    figure = Figure(figsize=(7, 4.5), layout="constrained")
    axes = figure.add_subplot()
    for op in OPS:
        rows = [b for b in report["bandwidth"] if b["op"] == op]
        if rows:
            axes.plot([b["bytes"] for b in rows], [b["busbw_gbps"] for b in rows], "o-", label=op)
    ticks = sorted({b["bytes"] for b in report["bandwidth"]})
    axes.set_xscale("log", base=2)
    axes.set_xticks(ticks, [format_size(t) for t in ticks], rotation=45, ha="right")
    axes.set_xlabel("size (all_gather: total output)")
    axes.set_ylabel("busbw (GB/s)")
    axes.set_title(
        f"accelbackends check: {report['accelerator']} with {report['backend']}, "
        f"{report['world_size']} ranks"
    )
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.savefig(path)
