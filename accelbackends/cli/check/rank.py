"""One rank's whole run: steps 2 to 4 under the watchdog, then the report that rank 0 prints."""

from __future__ import annotations

import dataclasses
import socket
import time
from typing import TYPE_CHECKING, Any

from ...plugin.errors import first_line
from ..text import plural
from .agree import max_over_ranks
from .compat import backend_library_version, default_store
from .copies import copy_lines, judge_copies, own_copies
from .correctness import run_checks
from .floors import Topology, match
from .health import device_faults, health_culprits, rank_device
from .heartbeat import Heartbeat
from .links import measure_links
from .progress import Progress
from .report import link_lines, print_json, versions
from .results import Result
from .session import Session, control_group, pid_space
from .sweep import copy_alone, sweep
from .thresholds import Floor
from .verdicts import below_line_rate, empty_verdict, fell_back, judge
from .watchdog import Watchdog

if TYPE_CHECKING:
    from ...plugin.types import Context, DeviceLinks
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
    watchdog = _watchdog(ctx, options, progress, heartbeat)
    try:
        with watchdog.step("creating the control group"):
            session = Session(
                ctx, options, control_group(ctx, options.timeout), watchdog, heartbeat, progress
            )
        init_seconds, ranks = _init_step(session, started, init_span)
        found = _measure(session, ranks) | {"init_seconds": round(init_seconds, 4)}
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
    return _judged(session, _header(ctx, options, started) | found)


def _watchdog(ctx: Context, options: Options, progress: Progress, heartbeat: Heartbeat) -> Watchdog:
    """The watchdog over every step; on expiry the report so far says which step and whom."""

    def expired(message: str) -> None:
        progress.update(ok=False, error=message)
        if heartbeat.silent():
            progress.update(stalled=message)
        if options.json and options.progress is None:
            # Under a launcher rank 0 is the reporting process: the JSON comes now or never.
            print_json(progress.report)

    return Watchdog(
        ctx.rank,
        options.timeout,
        explain=heartbeat.explain,
        on_expire=expired,
        announce=not (ctx.rank == 0 and options.progress),
    )


def _init_step(
    session: Session, started: float, init_span: str
) -> tuple[float, list[dict[str, Any]]]:
    """Step 2: the slowest rank's time to initialise and every rank's host and device, said
    one line per rank, as nccl-tests prints them."""
    ctx, watchdog, progress = session.ctx, session.watchdog, session.progress
    with watchdog.step("measuring the time to initialise"):
        init_seconds = max_over_ranks(ctx, session.control, [time.time() - started])[0]
    with watchdog.step("gathering the ranks' hosts and devices"):
        ranks = session.gather_objects(_whoami(ctx), "hosts and devices")
    # Where each rank's process can be looked for when contact is lost; not in the report.
    session.peers = {r["rank"]: (r["host"], r["pid"], r.pop("pid_space")) for r in ranks}
    progress.update(
        init_seconds=round(init_seconds, 4), hosts=sorted({r["host"] for r in ranks}), ranks=ranks
    )
    session.say(
        f"[2/4] init: {ctx.world_size} {plural(ctx.world_size, 'rank')} ready in "
        f"{init_seconds:.2f} s ({init_span}detect, select, bind, rendezvous, "
        "init_process_group; slowest rank)"
    )
    for entry in ranks:
        session.say(
            f"      rank {entry['rank']}: host {entry['host']}, device {entry['device']}, "
            f"local rank {entry['local_rank']}, pid {entry['pid']}"
        )
    return init_seconds, ranks


def _measure(session: Session, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The node's floors and health, each rank's own copies, the correctness checks, the
    bandwidth sweep (or one rank's device copy) and the links: the report's measured keys."""
    ctx = session.ctx
    facts = session.gather_objects(_node_facts(ctx), "node facts")
    floors = _pick_floors(session, ranks, facts)
    copies, problems = own_copies(session, facts[ctx.rank])
    floors["culprits"] += judge_copies(copies, floors["device_copy"], floors["host_copy"])
    for line in copy_lines(copies):
        session.say("      " + line)
    checks = run_checks(session)
    session.progress.update(checks=[c.as_json() for c in checks])
    copied: CopyMeasurement | None = None
    bandwidth: list[Measurement] = []
    if ctx.world_size == 1:
        copied, more = copy_alone(session)
    else:
        bandwidth, more = sweep(session)
    problems += more
    links, culprits, why_not = measure_links(session, [r["host"] for r in ranks])
    for line in link_lines(links, why_not):
        session.say("      " + line)
    if why_not.startswith("not run"):
        problems.append(Result("links", "not run", why_not))
    elif why_not.startswith("not supported"):
        problems.append(Result("links", "skipped", why_not))
    checks += session.gather(problems, "bandwidth")
    return {
        "hosts": sorted({r["host"] for r in ranks}),
        "ranks": ranks,
        "checks": [c.as_json() for c in checks],
        "bandwidth": [m.as_json() for m in bandwidth],
        "device_copy": copied.as_json() if copied else None,
        "copies": copies,
        "links": links,
        "floors": floors | {"culprits": [*floors["culprits"], *culprits]},
    }


def _judged(session: Session, report: dict[str, Any]) -> dict[str, Any]:
    """The report with its verdict: the flags' limits, or the floors the rules matched; the
    culprits of the health check, the copies and the links; the named signatures."""
    options, floors = session.options, report["floors"]
    limits = options.limits()
    if not options.min_busbw and floors["busbw_floor"]:
        limits = dataclasses.replace(limits, floors=(floors["busbw_floor"],))
    if floors["device_copy"]:
        rule = floors["device_copy"]
        limits = dataclasses.replace(limits, copy_floor=(rule["source"], rule["gbps"]))
    slow_fabric = below_line_rate(report, floors)
    report |= judge(report, limits, floors.pop("culprits"), [slow_fabric] if slow_fabric else [])
    floors.pop("busbw_floor")
    floors["health"] = [culprit.reason for culprit in floors["health"]]
    report["signatures"] = [s for s in (fell_back(report, floors), slow_fabric) if s]
    report["ok"] = report["verdict"] == "PASSED"
    if session.progress.report.get("text"):
        report["text"] = session.progress.report["text"]  # --quick's held lines; not in JSON
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
        "copies": [],
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


def _node_facts(ctx: Context) -> dict[str, Any]:
    """What this rank's node has, for the floors and the health check: its devices' model and
    link kind (from the accelerator plugin's ``links``; on a node whose devices this run does
    not use, those of the first plugin that finds some, as ``info`` shows them), its fastest
    InfiniBand/RoCE port that is up, the physical device this rank uses and, from one rank a
    node, the devices' faults."""
    from ...plugin.links import read_nics
    from ...plugin.types import Probe
    from ...registry.facade import default_registry
    from ..topology import node_devices

    registry = default_registry()
    probe = Probe(env=registry.env, root=registry.root)
    statuses = registry.detect()
    selected = next((s for s in statuses if s.name == ctx.accelerator), None)
    status, devices, why = node_devices(statuses, selected, probe)
    # The floors follow the devices the ranks use: a CPU run on a GPU node is not an H200's.
    used = devices if status is selected else []
    models = {d.model for d in used}
    kinds = {d.link_kind for d in used}
    rates = [n.gbps for n in read_nics(probe) if n.up and n.kind != "ethernet" and n.gbps]
    gpu, gpu_why = rank_device(
        _runtime(status.name if status else ""),
        ctx.device.index if status and ctx.device.type == status.spec.device_type else None,
        devices,
        registry.env,
    )
    return {
        "host": socket.gethostname(),
        "rank": ctx.rank,
        "gpu": gpu,
        "gpu_why": gpu_why,
        # The link the rank's GPU supports, that its host copies are held to.
        "pcie": _supported(devices, gpu),
        "faults": device_faults(devices) if ctx.local_rank == 0 else [],  # one rank a node
        "model": models.pop() if len(models) == 1 else None,
        "link": kinds.pop() if len(kinds) == 1 else None,
        "nic_gbps": max(rates) if rates else None,
        "why": why,
    }


def _supported(devices: list[DeviceLinks], gpu: int | None) -> tuple[int, int] | None:
    """The generation and width the GPU's PCIe link supports (a narrower trained link is a
    fault of its own), or None where not read."""
    link = next((d.pcie for d in devices if d.index == gpu), None) if gpu is not None else None
    if link is None or link.max_generation is None or link.max_width is None:
        return None
    return link.max_generation, link.max_width


def _runtime(accelerator: str) -> str:
    """The visible-devices rule of ``accelerator`` (`health.rank_device`): the cuda plugin's
    devices are ROCm's under a ROCm build of torch."""
    if accelerator == "cuda":
        import torch

        return "rocm" if torch.version.hip else "cuda"
    return accelerator


def _pick_floors(
    session: Session, ranks: list[dict[str, Any]], facts: list[dict[str, Any]]
) -> dict[str, Any]:
    """The floors that match what every rank found (``facts``, the same pick on every rank),
    and the devices' faults, said on rank 0: which rule and why, or that none matched."""
    ctx, options = session.ctx, session.options
    models = {f["model"] for f in facts}
    links = {f["link"] for f in facts}
    nic_rates = [f["nic_gbps"] for f in facts]
    topology = Topology(
        models.pop() if len(models) == 1 else None,
        links.pop() if len(links) == 1 else None,
        ctx.local_world_size,
        len({r["host"] for r in ranks}),
        None if None in nic_rates else min(nic_rates),
    )
    health = health_culprits(facts)
    picked: dict[str, Any] = {
        "health": health,
        "culprits": list(health),
        "topology": topology.describe(),
        "nic_gbps": topology.nic_gbps,
        "rules_from": options.rules_from,
        "busbw": None,
        "device_copy": None,
        "host_copy": None,
        "busbw_floor": None,
    }
    lines = [f"floors: {topology.describe()}; rules from {options.rules_from or 'nowhere'}"]
    for kind, name in _FLOOR_NAMES.items():
        rule = match(options.rules, kind, topology)
        if kind == "busbw" and ctx.world_size == 1:
            lines.append(f"  {name}: not judged: one rank has no collective bandwidth")
        elif kind == "busbw" and options.min_busbw:
            lines.append(f"  {name}: {options.min_busbw[0].source} (given, wins over the rules)")
        elif rule is None:
            lines.append(f"  {name}: no rule matched: correctness only for it")
        else:
            source = f"the floor of {rule.where} ({rule.why})"
            picked[kind] = {
                "gbps": None if kind == "host_copy" else rule.gbps,
                "fraction": rule.fraction,
                "source": source,
                "rule": rule.describe(),
                "link": rule.link,
            }
            lines.append(f"  {name}: matched {rule.describe()}")
            if kind == "busbw":
                picked["busbw_floor"] = Floor(None, rule.gbps, source)
    lines += [f"  health: {culprit.reason}" for culprit in health]
    for line in lines:
        session.say("      " + line)
    return picked


_FLOOR_NAMES = {
    "busbw": "bandwidth floor",
    "device_copy": "device copy floor",
    "host_copy": "host copy floor",
}
