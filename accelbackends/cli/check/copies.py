"""Each rank's own copies, before the collectives: its device memory copy (with several ranks;
one rank measures it in place of the bandwidth sweep, `sweep.copy_alone`), and its copies
between pinned host memory and its GPU, each way, over the PCIe link the probes found. Each is
judged against its floor, and one that falls short is a failure named by GPU and rank:
"GPU 0 on node-7 (rank 0): host->device 6.1 GB/s, expected >= 37.8 GB/s for PCIe Gen5 x16".
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .devicecopy import (
    COPY_ITERS,
    COPY_LABEL,
    DEVICE_TO_HOST,
    HOST_TO_DEVICE,
    copy_size,
    measure_copy,
    measure_transfer,
)
from .floors import pcie_gbps
from .results import Result
from .verdicts import Culprit

if TYPE_CHECKING:
    from .session import Session

__all__ = ["copy_lines", "judge_copies", "own_copies"]

#: Each direction and its key in a rank's entry.
DIRECTIONS = {HOST_TO_DEVICE: "host_to_device", DEVICE_TO_HOST: "device_to_host"}


def own_copies(
    session: Session, mine: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], list[Result]]:
    """Every rank's copies, measured each on its own device at once (as a job's ranks load a
    node) and gathered: one entry per rank. ``mine`` is this rank's node facts (its GPU and
    the PCIe link that GPU supports, or why not known). Returns the entries and this rank's
    problems (a copy that raised)."""
    ctx, options = session.ctx, session.options
    several = ctx.world_size > 1
    pcie = mine["pcie"]
    entry: dict[str, Any] = {
        "rank": ctx.rank,
        "host": mine["host"],
        "device": str(ctx.device),
        "gpu": mine["gpu"],
        "pcie": pcie,
        "device_copy": None,
        "host_to_device": None,
        "device_to_host": None,
        "host_copy_missing": None if pcie else _why_no_link(ctx.device.type, mine),
        "error": None,
    }
    problems: list[Result] = []
    if several or pcie:  # the same on every rank with one rank; with several, every rank copies
        nbytes = copy_size(ctx.device.type, options.quick, options.max_bytes)
        call = functools.partial(_measure, ctx.device, nbytes, options, several, bool(pcie))
        attempt = session.attempt(call, step="copies", what="each rank's own copies")
        if attempt.value is None:
            entry["error"] = f"raised {attempt.error}"
            problems.append(Result("copies", "failed", entry["error"]))
        else:
            entry |= attempt.value
    return session.gather_objects(entry, "copies"), problems


def _why_no_link(device_type: str, mine: Mapping[str, Any]) -> str:
    if device_type == "cpu":
        return "not measured: a CPU rank's device is host memory, with no link to cross"
    if mine["gpu"] is None:
        return f"not measured: this rank's GPU is not known ({mine['gpu_why']})"
    return f"not measured: the PCIe link of GPU {mine['gpu']} was not read"


def _measure(
    device: Any, nbytes: int, options: Any, several: bool, over_pcie: bool
) -> dict[str, Any]:
    iters, warmup = options.iters or COPY_ITERS, options.warmup
    found: dict[str, Any] = {}
    if several:
        found["device_copy"] = measure_copy(device, nbytes, iters=iters, warmup=warmup).as_json()
    if over_pcie:
        for direction, key in DIRECTIONS.items():
            measured = measure_transfer(device, nbytes, direction, iters=iters, warmup=warmup)
            found[key] = measured.as_json()
    return found


def judge_copies(
    entries: Sequence[dict[str, Any]],
    copy_floor: Mapping[str, Any] | None,
    host_floor: Mapping[str, Any] | None,
) -> list[Culprit]:
    """Mark each entry with its floors, ``problems`` and ``ok`` (in place) and return a
    ``device`` culprit per rank whose copy fell short: its device memory copy below
    ``copy_floor`` (the matched ``device_copy`` rule), a host<->device copy below
    ``host_floor``'s fraction of its GPU's PCIe link rate (the matched ``host_copy`` rule)."""
    culprits = []
    for entry in entries:
        problems = []
        copied = entry["device_copy"]
        entry["device_copy_floor_gbps"] = copy_floor["gbps"] if copy_floor and copied else None
        if copy_floor and copied and copied["gbps"] < copy_floor["gbps"]:
            problems.append(
                f"{COPY_LABEL} {copied['gbps']:.4g} GB/s, expected >= {copy_floor['gbps']:g} "
                f"GB/s ({copy_floor['source']})"
            )
        floor = _host_floor(entry, host_floor)
        entry["host_copy_floor_gbps"] = None if floor is None else round(floor, 3)
        for direction, key in DIRECTIONS.items():
            moved = entry[key]
            if host_floor and floor is not None and moved and moved["gbps"] < floor:
                generation, width = entry["pcie"]
                problems.append(
                    f"{direction} {moved['gbps']:.3g} GB/s, expected >= {floor:.3g} GB/s for "
                    f"PCIe Gen{generation} x{width} ({host_floor['source']})"
                )
        entry["problems"] = problems
        entry["ok"] = not problems and entry["error"] is None
        if problems:
            culprits.append(
                Culprit(
                    "device",
                    (entry["host"],),
                    (entry["rank"],),
                    f"{_name(entry)}: {'; '.join(problems)}",
                )
            )
    return culprits


def _host_floor(entry: Mapping[str, Any], host_floor: Mapping[str, Any] | None) -> float | None:
    if host_floor is None or not entry["pcie"]:
        return None
    rate = pcie_gbps(*entry["pcie"])
    return None if rate is None else host_floor["fraction"] * rate


def _name(entry: Mapping[str, Any]) -> str:
    """``GPU 3 on n7 (rank 2)``, or ``rank 2 on n7 (cpu)`` where no GPU is known."""
    if entry["gpu"] is not None:
        return f"GPU {entry['gpu']} on {entry['host']} (rank {entry['rank']})"
    return f"rank {entry['rank']} on {entry['host']} ({entry['device']})"


def copy_lines(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per rank: what it measured, against which floor, and its verdict."""
    lines = []
    for entry in entries:
        parts = []
        copied = entry["device_copy"]
        if copied:
            floor = entry["device_copy_floor_gbps"]
            shown = "" if floor is None else f" (floor {floor:g})"
            parts.append(f"{COPY_LABEL} {copied['gbps']:.4g} GB/s{shown}")
        moved = [entry[key] for key in DIRECTIONS.values() if entry[key]]
        if moved:
            floor = entry["host_copy_floor_gbps"]
            link = f"PCIe Gen{entry['pcie'][0]} x{entry['pcie'][1]}"
            shown = f"{link}, no floor" if floor is None else f"{link}, floor {floor:g}"
            rates = ", ".join(f"{m['direction']} {m['gbps']:.3g} GB/s" for m in moved)
            parts.append(f"{rates} ({shown})")
        elif entry["host_copy_missing"]:
            parts.append(f"host<->device {entry['host_copy_missing']}")
        if entry["error"]:
            parts.append(f"FAILED: {entry['error']}")
        verdict = "ok" if entry["ok"] else "SLOW" if entry["problems"] else "FAILED"
        lines.append(f"{_name(entry)}: {'; '.join(parts)}: {verdict}")
    return lines
