"""What the user reads: the environment line, the correctness grid, the bandwidth table, the
verdict, the JSON object and the plot."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..text import aligned, plural, rank_list, say
from .bandwidth import OPS, Measurement
from .collectives import DTYPES, Check, tolerance_text
from .sizes import format_size
from .verdicts import ONLY_NODE, empty_verdict, miss_summary

if TYPE_CHECKING:
    from ...plugin.types import Selection
    from .results import Result
    from .thresholds import BaselineRow, Floor

__all__ = [
    "environment",
    "failure_report",
    "grid",
    "link_lines",
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
#: Beyond this many links, the table lists only the slow and wrong ones.
_LINK_ROWS = 16


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


def link_lines(links: list[dict[str, Any]], why_not: str) -> Iterator[str]:
    """The links as a table (every link up to `_LINK_ROWS`, else the bad ones and a summary)."""
    if why_not:
        yield f"links: {why_not}"
        return
    word = {
        (True, False): "ok",
        (True, True): "SLOW",
        (False, False): "WRONG",
        (False, True): "WRONG",
    }
    bad = [link for link in links if link["slow"] or not link["ok"]]
    shown = links if len(links) <= _LINK_ROWS else bad
    if shown:
        rows = [["kind", "ranks", "hosts", "time (us)", "GB/s", "median", "verdict"]]
        for link in shown:
            time_us = "-" if link["time_us"] is None else f"{link['time_us']:.1f}"
            median = "-" if link["median_gbps"] is None else f"{link['median_gbps']:.3f}"
            rows.append(
                [
                    link["kind"],
                    f"{link['ranks'][0]} <-> {link['ranks'][1]}",
                    " <-> ".join(link["hosts"]),
                    time_us,
                    f"{link['gbps']:.3f}",
                    median,
                    word[link["ok"], link["slow"] and link["ok"]],
                ]
            )
        yield from aligned(rows)
    if len(links) > _LINK_ROWS:
        yield f"{len(links)} links, {len(bad)} slow or wrong (only those are listed)"


def verdict(report: dict[str, Any]) -> str:
    """The verdict, first: PASSED with the peak busbw and the nodes, or FAILED naming the checks
    and ranks, the nodes and links, the sizes below a threshold or the baseline; then the
    failing and passing nodes, one line per culprit, what failed the job without being pinned
    to a node, and one line per miss. With one rank, the device memory copy stands where the
    peak busbw would: a one-rank collective measures no bandwidth."""
    checks = report["checks"]
    not_run = [c for c in checks if not c["ok"] and c["detail"].startswith("not run")]
    failed = [c for c in checks if not c["ok"] and c not in not_run]
    skipped = [c for c in checks if c["skipped"]]
    passed = len(checks) - len(failed) - len(not_run) - len(skipped)
    where = f"{report['accelerator']} with {report['backend']}, {_ranks(report['world_size'])}"
    counts = f"{passed} passed, {len(failed)} failed, {len(skipped)} skipped"
    if not_run:
        counts += f", {len(not_run)} not run"
    if report.get("verdict", "FAILED") == "FAILED":
        reasons = ", ".join(_reasons(report, failed, bool(not_run))) or "see above"
        first = f"verdict: FAILED: {reasons} ({counts}; {where})"
    else:
        first = _passed(report, f"{counts}; {where}")
    return "\n".join([first, *_details(report)])


def _reasons(report: dict[str, Any], failed: list[dict[str, Any]], not_run: bool) -> list[str]:
    """What failed, in the verdict's words: the signatures, the failed checks and their ranks,
    the culprits that are not named by those already, the misses, the first other problem."""
    reasons = [f"{c['name']} on {rank_list(c['ranks'])}" for c in failed[:4]]
    if len(failed) > 4:
        more = len(failed) - 4
        reasons.append(f"{more} more {plural(more, 'check')}")
    if not_run and not failed:
        reasons.append("checks not run")
    reasons += [
        _short(c)
        for c in report.get("culprits", [])
        if c["reason"] and not _from_checks(c) and not _from_misses(c)
    ]
    reasons[:0] = report.get("signatures", [])
    reasons += miss_summary([m["kind"] for m in report.get("misses", [])])
    # A signature that failed the job is a problem too: named once, first.
    reasons += [p for p in report.get("problems", []) if p not in reasons][:1]
    return reasons


def _passed(report: dict[str, Any], said: str) -> str:
    """``verdict: PASSED (...; peak busbw ...; N of N nodes passing)``; with one rank, its
    device memory copy where the peak busbw would stand."""
    hosts = len(report["hosts"])
    peak = max((b["busbw_gbps"] for b in report["bandwidth"]), default=None)
    best = "" if peak is None else f"; peak busbw {peak:.2f} GB/s"
    copied = report.get("device_copy")
    if copied:  # one rank: no collective bandwidth, and none is claimed
        best = f"; {copied['what']}: {copied['gbps']:.2f} GB/s, one rank: no collective bandwidth"
    return f"verdict: PASSED ({said}{best}; {hosts} of {hosts} {plural(hosts, 'node')} passing)"


def _details(report: dict[str, Any]) -> Iterator[str]:
    """The lines under the verdict: the failing and passing nodes, each culprit, what is not
    pinned to a node, each miss, what was not judged."""
    hosts = len(report["hosts"])
    failing, passing = report.get("failing_nodes", []), report.get("passing_nodes", [])
    if failing:
        yield f"failing nodes ({len(failing)} of {hosts}): {', '.join(failing)}"
    if failing or report.get("verdict") == "FAILED":
        yield f"passing nodes ({len(passing)} of {hosts}): {', '.join(passing) or '-'}"
    for culprit in report.get("culprits", []):
        if not _from_checks(culprit):
            yield f"  {_long(culprit)}"
    unpinned = report.get("unpinned", [])
    if unpinned:
        yield f"not pinned to a node: {'; '.join(unpinned)}"
    for miss in report.get("misses", []):
        yield f"  {_miss_text(miss)}"
    for note in report.get("not_judged", []):
        yield f"not judged: {note}"


def _ranks(count: int) -> str:
    return f"{count} {plural(count, 'rank')}"


def _from_checks(culprit: dict[str, Any]) -> bool:
    # The failed checks are named by the verdict's own words already.
    return bool(culprit["reason"].startswith("wrong or failed"))


def _from_misses(culprit: dict[str, Any]) -> bool:
    # A one-node job's miss, pinned on its node: the verdict names the sizes already.
    return bool(culprit["reason"].startswith(ONLY_NODE))


def _short(culprit: dict[str, Any]) -> str:
    if culprit["kind"] == "device":  # a device's own fault or slow copy: it names itself
        return str(culprit["reason"])
    slow = "wrong data" if "wrong data" in culprit["reason"] else "slow"
    if culprit["kind"] == "link":
        (a, b), (ra, rb) = culprit["hosts"], culprit["ranks"]
        return f"link {a} rank {ra} <-> {b} rank {rb} {slow}"
    if culprit["kind"] == "node":
        return f"node {culprit['hosts'][0]} {slow}"
    return f"rank {culprit['ranks'][0]} on {culprit['hosts'][0]} {slow}"


def _long(culprit: dict[str, Any]) -> str:
    from .verdicts import Culprit

    return Culprit(
        culprit["kind"], tuple(culprit["hosts"]), tuple(culprit["ranks"]), culprit["reason"]
    ).text()


def _miss_text(miss: dict[str, Any]) -> str:
    from .thresholds import Miss

    return Miss(
        miss["kind"],
        miss["op"],
        miss["bytes"],
        miss["busbw_gbps"],
        miss["limit_gbps"],
        miss["source"],
        miss["noise"],
        miss.get("baseline_gbps"),
    ).text()


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
        "verdict": "FAILED",
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
        "device_copy": None,
        "copies": [],
    } | empty_verdict()
    keep = ("verdict", "ok", "error", "stalled", "failing_nodes", "passing_nodes", "text")
    report.update({k: v for k, v in (so_far or {}).items() if k not in keep})
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


def plot(
    path: Path,
    report: dict[str, Any],
    floors: Sequence[Floor] = (),
    baseline: Sequence[BaselineRow] = (),
) -> None:
    """busbw against size, one line per swept operation, into a .png, .svg or .pdf file; each
    ``--min-busbw`` floor as a red mark (a line across at the largest size when it has no
    size), the baseline as a dashed line per operation."""
    from matplotlib.figure import Figure  # type: ignore[import-not-found,unused-ignore]

    figure = Figure(figsize=(7, 4.5), layout="constrained")
    axes = figure.add_subplot()
    colours = {}
    for op in OPS:
        rows = [b for b in report["bandwidth"] if b["op"] == op]
        if rows:
            (line,) = axes.plot(
                [b["bytes"] for b in rows], [b["busbw_gbps"] for b in rows], "o-", label=op
            )
            colours[op] = line.get_color()
    for op in OPS:
        base = sorted((b.nbytes, b.busbw_gbps) for b in baseline if b.op == op)
        if base:
            axes.plot(
                [b[0] for b in base],
                [b[1] for b in base],
                "--",
                color=colours.get(op),
                alpha=0.6,
                label=f"{op} baseline",
            )
    ticks = sorted({b["bytes"] for b in report["bandwidth"]})
    for floor in floors:
        label = f"{floor.source} {floor.gbps:g} GB/s"
        if floor.nbytes is None and ticks:
            axes.axhline(floor.gbps, color="red", linestyle=":", label=label)
        elif floor.nbytes is not None:
            axes.plot([floor.nbytes], [floor.gbps], "rv", markersize=9, label=label)
    axes.set_xscale("log", base=2)
    axes.set_xticks(ticks, [format_size(t) for t in ticks], rotation=45, ha="right")
    axes.set_xlabel("size (all_gather: total output)")
    axes.set_ylabel("busbw (GB/s)")
    axes.set_title(
        f"accelbackends check: {report['accelerator']} with {report['backend']}, "
        f"{_ranks(report['world_size'])}: {report.get('verdict', '')}"
    )
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.savefig(path)
