"""What ``accelbackends info`` reports: plugins, detection, selection, cluster, overrides, versions.

Everything here is read without importing torch: torch's version comes from its installed
metadata. ``info`` is what a user runs to find out what is wrong, so a bad override or launcher
variable does not stop the report: each section that cannot be computed carries its ``error``,
shown where it applies, and the report's own ``error`` is the first of them (the CLI then exits
2).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ..job import affinity, worldcheck
from ..job.recognise import recognise
from ..job.select import select
from ..plugin import config, torchcompat
from ..plugin.errors import AccelBackendsError, ConfigError, first_line
from ..plugin.packages import installed
from ..registry.facade import Registry
from ..rendezvous import secret
from . import topology
from .text import aligned, plural, wrap

__all__ = ["collect", "render", "render_affinity", "render_bug_report"]

_CLUSTER_KEYS = (
    "rank",
    "world_size",
    "local_rank",
    "local_world_size",
    "node_rank",
    "master_addr",
    "master_port",
)


def _installed_version(distribution: str) -> str | None:
    found = installed(distribution)
    return found.version if found else None


#: What a node without torch is told (info exits 1: nothing can run there).
NO_TORCH = (
    "torch is not installed, so nothing can run here; install it (pip install torch, or its "
    "CPU build from PyTorch's CPU wheel index, see the README)"
)


class _Problems:
    """The report's errors in the order found, each marked bad input (exit 2) or not (1)."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.bad_input: list[bool] = []

    def add(self, message: str, bad_input: bool) -> str:
        self.errors.append(message)
        self.bad_input.append(bad_input)
        return message

    def failed(self, exc: AccelBackendsError) -> str:
        return self.add(first_line(exc), isinstance(exc, ConfigError))

    def kind(self) -> str | None:
        if not self.errors:
            return None
        return "bad input" if any(self.bad_input) else "failure"


def collect(
    registry: Registry, *, show_all: bool = False, import_torch: bool = False
) -> dict[str, Any]:
    """The report as plain data (what ``info --json`` prints).

    Never raises for bad input: a section that cannot be computed has an ``error``, and so
    has the report (the first one; ``errors`` lists them all). ``import_torch``: ask the
    imported torch which backends it has, instead of reading its build files. NVML, where it is
    asked, is initialised once for detection and links.
    """
    from ..accelerators.cuda import nvml_session

    with nvml_session():
        return _collect(registry, show_all, import_torch)


def _collect(registry: Registry, show_all: bool, import_torch: bool) -> dict[str, Any]:
    problems = _Problems()
    torch_section = _torch_section(import_torch)
    if torch_section["error"]:
        problems.add(torch_section["error"], False)
    plugins, accelerators, plugins_error = _plugins_and_accelerators(
        registry, show_all, torch_section["version"], problems
    )
    selected, selection = _selected(registry, torch_section, plugins_error, problems)
    cluster, found = _cluster(registry, plugins_error, selection, problems)
    cpu_affinity = _cpu_affinity(registry, selection, found, problems)
    membership_line = secret.info_line(registry.env)
    if membership_line.startswith("error: "):
        problems.add(membership_line.removeprefix("error: "), True)
    nccl = None
    shared_gpus: dict[str, Any] | None = None
    if selection is not None:
        nccl = torchcompat.nccl_note(selection.backend, _installed_version("torch"), registry.env)
        if found is not None:
            shared_gpus = _shared_gpus(registry, selection, found, problems.failed)
    links = topology.collect(
        list(registry.detect()) if plugins_error is None else [],
        selection.status if selection else None,
        selection.backend if selection else None,
        registry.env,
        registry.root,
    )
    override_errors = _switch_and_overrides(registry, problems)
    return {
        "error": problems.errors[0] if problems.errors else None,
        "errors": problems.errors,
        # Bad input (a variable, an override: exit 2) or a plugin that failed (exit 1).
        "error_kind": problems.kind(),
        "plugins": plugins,
        "plugins_error": plugins_error,
        "accelerators": accelerators,
        "selected": selected,
        "nccl": nccl,
        "shared_gpus": shared_gpus,
        "links": links,
        "cluster": cluster,
        "membership": membership_line,
        "torch": torch_section,
        "cpu_affinity": cpu_affinity,
        "overrides": config.overrides(registry.env),
        "override_errors": override_errors,
        "unknown_variables": registry.unknown_variables,
        "versions": versions(),
        "platform": platform_name(),
    }


def _plugins_and_accelerators(
    registry: Registry, show_all: bool, torch_version: str | None, problems: _Problems
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
    """The plugins listed (the built-ins only with ``--all`` or when not active), every
    declared accelerator with its detection, and why plugins could not load (or None)."""
    try:
        plugins = [
            {
                "name": p.name,
                "distribution": p.distribution,
                "version": p.version,
                "status": p.status,
                "error": p.error,
                "builtin": p.builtin,
            }
            for p in registry.plugins
            if show_all or not p.builtin or p.status != "active"
        ]
        accelerators = [
            {
                "name": c.name,
                "plugin": c.plugin,
                "available": c.available,
                "device_count": c.detection.device_count,
                "priority": c.spec.priority,
                "backends": list(c.spec.backends),
                "refused_backends": torchcompat.refused_backends(c.spec.backends, torch_version)
                if torch_version
                else {},
                "default_backend": c.spec.default_backend,
                "reason": c.detection.reason,
                "refusal": c.detection.refusal or None,
                "expected_busbw_gbps": c.spec.expected_busbw_gbps,
            }
            for c in registry.detect()
        ]
    except AccelBackendsError as exc:
        return [], [], problems.failed(exc)
    return plugins, accelerators, None


def _selected(
    registry: Registry,
    torch_section: dict[str, Any],
    plugins_error: str | None,
    problems: _Problems,
) -> tuple[dict[str, Any], Any]:
    """The selection as ``init()`` would make it, and the `Selection` itself (or None)."""
    selected: dict[str, Any] = dict.fromkeys(
        ("accelerator", "backend", "reason", "backend_reason", "error")
    )
    if torch_section["version"] is None:
        selected["error"] = NO_TORCH
        return selected, None
    if plugins_error is not None:
        selected["error"] = f"not selected: {plugins_error}"
        return selected, None
    try:
        selection = select(registry=registry)
    except AccelBackendsError as exc:
        selected["error"] = problems.failed(exc)
        return selected, None
    selected.update(
        accelerator=selection.accelerator,
        backend=selection.backend,
        reason=selection.reason,
        backend_reason=selection.backend_reason,
    )
    return selected, selection


def _cluster(
    registry: Registry, plugins_error: str | None, selection: Any, problems: _Problems
) -> tuple[dict[str, Any], Any]:
    """The cluster environment the launcher variables describe, with the world check, and
    the `ClusterInfo` itself (or None)."""
    cluster: dict[str, Any] = {
        "launcher": None,
        **dict.fromkeys(_CLUSTER_KEYS),
        "sources": {},
        "world_check": None,
    }
    try:
        found = recognise(registry) if plugins_error is None else None
    except AccelBackendsError as exc:
        cluster["error"] = problems.failed(exc)
        return cluster, None
    if found is None:
        cluster["error"] = f"not recognised: {plugins_error}"
        return cluster, None
    cluster.update({key: getattr(found, key) for key in ("launcher", *_CLUSTER_KEYS)})
    cluster.update(sources=dict(found.sources), error=None)
    if found.world_size > 1 and found.master_addr is not None:
        _check_master_addr(cluster, found, problems)
    cluster["world_check"] = _world_check(registry, found, selection)
    if cluster["world_check"]["error"] is not None and cluster.get("error") is None:
        cluster["error"] = problems.add(cluster["world_check"]["error"], True)
    return cluster, found


def _check_master_addr(cluster: dict[str, Any], found: Any, problems: _Problems) -> None:
    """The address rank 0 will host on and the others dial: flagged here, where the user looks,
    instead of at the end of a rendezvous timeout."""
    from ..rendezvous import network  # only for a job of more than one rank

    where = found.source("master_addr")
    problem = network.master_addr_problem(found.master_addr, where, check_resolves=False)
    if problem is not None:
        cluster["error"] = problems.add(problem, True)
    else:
        # Only a warning: info may run where the compute nodes' names do not resolve (a login
        # node); rank 0 refuses the same name with exit 2.
        cluster["warning"] = network.master_addr_problem(found.master_addr, where)


def _cpu_affinity(
    registry: Registry, selection: Any, found: Any, problems: _Problems
) -> dict[str, Any]:
    if found is None:
        return {"error": "not planned: the cluster environment is not known"}
    if selection is None:
        return {"error": "not planned: no accelerator was selected"}
    try:
        return affinity.collect(registry, selection.status, found)
    except AccelBackendsError as exc:
        return {"error": problems.failed(exc)}


def _switch_and_overrides(registry: Registry, problems: _Problems) -> dict[str, str]:
    """The NCCL switch's problem and every bad override, added to the problems once each;
    returns the overrides' errors by variable."""
    switch = torchcompat.nccl_switch_problem(registry.env)
    if switch is not None:
        problems.add(switch, True)
    override_errors = config.validate(registry.env)
    new = [message for message in override_errors.values() if message not in problems.errors]
    for message in new:
        problems.add(message, True)
    return override_errors


def _shared_gpus(
    registry: Registry, selection: Any, found: Any, failed: Any
) -> dict[str, Any] | None:
    """What ``init()`` will do where this node's ranks share the selected GPUs over NCCL
    (`ACCELBACKENDS_SHARE_DEVICES`): refuse before the rendezvous (NCCL before 2.30), or set
    ``NCCL_MULTI_RANK_GPU_ENABLE=1``; None where they do not share GPUs over NCCL."""
    from ..accelerators import cuda

    if selection.spec is not cuda.SPEC:
        return None
    try:
        note = cuda.shared_gpus_note(
            selection.backend,
            local_world_size=found.local_world_size,
            count=selection.status.detection.device_count,
            env=registry.env,
        )
    except AccelBackendsError as exc:
        return {"note": None, "error": failed(exc)}
    return None if note is None else {"note": note, "error": None}


def _world_check(registry: Registry, found: Any, selection: Any) -> dict[str, Any]:
    """`accelbackends.job.worldcheck`'s verdict as ``init()`` would reach it: the recognised world
    against every other launcher's and scheduler's variables, and Kubeflow's process count
    against the selected accelerator's devices."""
    report: dict[str, Any] = {"signals": [], "standalone": False, "skipped": "", "error": None}
    try:
        meant = worldcheck.standalone(None, registry.env)
        verdict = worldcheck.check(found, registry.env, standalone=meant)
    except AccelBackendsError as exc:
        report["error"] = first_line(exc)
        return report
    report.update(
        signals=[
            {"scheduler": s.scheduler, "variables": s.variables, "processes": s.processes}
            for s in verdict.signals
        ],
        standalone=verdict.standalone,
        skipped=verdict.skipped,
        error=verdict.problem,
    )
    if verdict.problem is None and selection is not None:
        report["error"] = worldcheck.check_devices(
            found, selection.status, registry.env, standalone=meant
        )
    return report


def _torch_section(import_torch: bool) -> dict[str, Any]:
    """Whether torch is installed, has ``torch.distributed``, and which backends it was built
    with: read from its build files, or asked of torch itself with ``import_torch``."""
    from ..host.torchfeatures import ask_torch, read_build_files
    from ..plugin.errors import InitError

    section: dict[str, Any] = {
        "version": _installed_version("torch"),
        "distributed": None,
        "backends": [],
        "source": None,
        "error": None,
    }
    if section["version"] is None:
        section["error"] = NO_TORCH
        return section
    try:
        features = ask_torch() if import_torch else read_build_files()
    except InitError as exc:  # an auto-loaded device extension broke import torch
        section["error"] = first_line(exc)
        return section
    if features is not None:
        section.update(
            distributed=features.distributed,
            backends=list(features.backends),
            source=features.source,
        )
        if features.distributed is False:
            section["error"] = (
                f"torch {section['version']} was built without torch.distributed; install a "
                "build that has it (every wheel from PyTorch's own indexes does)"
            )
    return section


def platform_name() -> str:
    """What `platform.platform()` says on Linux (``Linux-6.8.0-x86_64-with-glibc2.35``), from
    `os.uname` and the C library's own answer: `platform.platform()` starts ``uname -p`` in a
    subprocess and scans the interpreter's binary for the C library's version, about 50 ms of a
    100 ms ``info``."""
    system = os.uname()
    name = f"{system.sysname}-{system.release}-{system.machine}"
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):  # not glibc (musl, macOS): no such name
        libc = ""
    return f"{name}-with-{libc.replace(' ', '')}" if libc else name


def versions() -> dict[str, str | None]:
    """Python, torch, pluggy and accelbackends, read without importing torch."""
    from .._version import __version__

    return {
        "python": sys.version.split()[0],
        "torch": _installed_version("torch"),
        "pluggy": _installed_version("pluggy"),
        "accelbackends": __version__,
    }


def render(report: dict[str, Any], width: int | None = None) -> str:
    """The report as text for a terminal, wrapped to ``width`` where given."""
    lines = [
        *_render_selected(report),
        "",
        *_render_accelerators(report, width),
        "",
        *topology.render(report["links"]),
        "",
        *_render_cluster(report["cluster"], width),
        "",
        *_render_cpu_affinity(report),
        "",
        *_render_plugins(report["plugins"], width),
        "",
        _torch_line(report["torch"]),
        "",
        f"membership: {report['membership']}",
        "",
        *_render_overrides(report, width),
        "",
        "versions: "
        + ", ".join(
            f"{name} {version or 'not installed'}" for name, version in report["versions"].items()
        ),
    ]
    return "\n".join(wrap(line, width) for line in lines)


def _render_selected(report: dict[str, Any]) -> list[str]:
    selected = report["selected"]
    if selected["error"]:
        lines = [f"selected: none: error: {selected['error']}"]
    else:
        lines = [
            f"selected: {selected['accelerator']} with {selected['backend']}",
            f"  why: {selected['reason']}; backend: {selected['backend_reason']}",
        ]
    if report.get("nccl"):
        lines.append(f"  nccl: {report['nccl']}")
    shared = report.get("shared_gpus")
    if shared:
        lines.append(
            f"  shared GPUs: error: {shared['error']}"
            if shared["error"]
            else f"  shared GPUs: {shared['note']}"
        )
    return lines


def _render_accelerators(report: dict[str, Any], width: int | None) -> list[str]:
    if report["plugins_error"]:
        return [f"accelerators: not detected: error: {report['plugins_error']}"]
    rows = [["name", "available", "devices", "priority", "backends", "plugin", "reason"]]
    for acc in report["accelerators"]:
        backends = ",".join(
            f"{b}*" if b == acc["default_backend"] else b
            for b in acc["backends"]
            if b not in acc["refused_backends"]
        )
        rows.append(
            [
                acc["name"],
                "refused" if acc.get("refusal") else "yes" if acc["available"] else "no",
                str(acc["device_count"]),
                str(acc["priority"]),
                backends,
                acc["plugin"],
                acc["reason"],
            ]
        )
    lines = ["accelerators:", *aligned(rows, "  ", width), "  (* default backend)"]
    lines += _refused_backends(report)
    for acc in report["accelerators"]:
        if acc.get("expected_busbw_gbps"):
            lines.append(
                f"  {acc['name']}: its plugin expects a busbw of {acc['expected_busbw_gbps']:g}"
                " GB/s on its fabric (check's default --min-busbw)"
            )
    return lines


def _refused_backends(report: dict[str, Any]) -> list[str]:
    """A line per accelerator and reason for the backends the installed torch refuses."""
    lines = []
    for acc in report["accelerators"]:
        reasons: dict[str, list[str]] = {}
        for backend, why in acc["refused_backends"].items():
            reasons.setdefault(why, []).append(backend)
        lines += [
            f"  {acc['name']}: {', '.join(names)} refused on torch "
            f"{report['torch']['version']}: {why}"
            for why, names in reasons.items()
        ]
    return lines


def _render_cluster(cluster: dict[str, Any], width: int | None) -> list[str]:
    lines = [f"cluster: {cluster['launcher'] or 'unknown'}"]
    if cluster.get("error"):
        lines[-1] += f": error: {cluster['error']}"
    if cluster.get("warning"):
        lines.append(f"  warning: {cluster['warning']}")
    check = cluster.get("world_check")
    if check is not None and check["error"] is None:
        seen = "; ".join(f"{s['scheduler']}: {s['variables']}" for s in check["signals"])
        if check["skipped"]:
            lines.append(f"  world check: not compared: {check['skipped']}")
        elif check["standalone"] and seen:
            lines.append(
                f"  world check: standalone (ACCELBACKENDS_STANDALONE): not compared with {seen}"
            )
        elif seen:
            lines.append(f"  world check: agrees with {seen}")
    if cluster["launcher"] is not None:
        sources = cluster["sources"]
        rows = [
            [
                key,
                "-" if cluster[key] is None else str(cluster[key]),
                f"from {sources[key]}" if key in sources else "",
            ]
            for key in _CLUSTER_KEYS
        ]
        lines += aligned(rows, "  ", width)
    return lines


def _render_cpu_affinity(report: dict[str, Any]) -> list[str]:
    if "mode" in report["cpu_affinity"]:
        return render_affinity(report["cpu_affinity"])
    why = report["cpu_affinity"]["error"]
    return [f"cpu affinity: {'error: ' if why in report['errors'] else ''}{why}"]


def _render_plugins(plugins: list[dict[str, Any]], width: int | None) -> list[str]:
    if not plugins:
        return ["plugins: none besides the built-ins (--all lists them)"]
    rows = [["name", "distribution", "version", "status", "error"]]
    rows += [
        [p["name"], p["distribution"] or "-", p["version"] or "-", p["status"], p["error"]]
        for p in plugins
    ]
    return ["plugins:", *aligned(rows, "  ", width)]


def _render_overrides(report: dict[str, Any], width: int | None) -> list[str]:
    overrides = report["overrides"]
    if not overrides:
        return ["overrides: none (no ACCELBACKENDS_* variable set)"]
    notes = report["override_errors"] | {
        key: f"warning: {note}" for key, note in report["unknown_variables"].items()
    }
    rows = [
        [f"{key}={config.shown(value)[1:-1]}", _note(notes.get(key))]
        for key, value in overrides.items()
    ]
    return ["overrides:", *aligned(rows, "  ", width)]


def _torch_line(torch: dict[str, Any]) -> str:
    if torch["version"] is None:
        return f"torch: not installed: error: {torch['error']}"
    if torch["error"]:
        return f"torch: {torch['version']}: error: {torch['error']}"
    if torch["distributed"] is None:
        return f"torch: {torch['version']}; torch.distributed: {torch['source']}"
    backends = ", ".join(torch["backends"]) or "none"
    return (
        f"torch: {torch['version']}; torch.distributed: yes, with {backends} "
        f"(from {torch['source']})"
    )


def _note(message: str | None) -> str:
    if message is None:
        return ""
    return message if message.startswith("warning: ") else f"error: {message}"


def render_bug_report(report: dict[str, Any], argv: list[str]) -> str:
    """``info --report``: one Markdown block to paste into a bug report: versions, platform,
    how the command was run, the launcher variables it saw, and the whole report."""
    from ..environments.variables import LAUNCHER_PREFIXES, LAUNCHER_VARIABLES

    launcher = {
        key: config.shown(value)[1:-1]
        for key, value in sorted(os.environ.items())
        if (key in LAUNCHER_VARIABLES or key.startswith(LAUNCHER_PREFIXES))
        and not key.startswith(config.PREFIX)
    }
    lines = [
        f"<!-- accelbackends info --report: {_where_to_report(project_urls())} -->",
        "```text",
        f"accelbackends {report['versions']['accelbackends']}",
        f"platform: {report['platform']}",
        f"python: {report['versions']['python']} ({sys.implementation.name}) at "
        f"{os.path.basename(sys.executable)}",
        "packages: "
        + ", ".join(
            f"{name} {version or 'not installed'}"
            for name, version in report["versions"].items()
            if name != "python"
        ),
        f"command: accelbackends {' '.join(argv)}".rstrip(),
        "launcher variables: " + (", ".join(f"{k}={v}" for k, v in launcher.items()) or "none"),
        "",
        render(report),
        "```",
    ]
    return "\n".join(lines)


#: The labels of a package's ``Project-URL`` that name its issue tracker (compared lowercased,
#: without spaces, dashes or underscores, as packaging tools normalise them).
_TRACKER_LABELS = ("issues", "issuetracker", "bugtracker", "bugs", "tracker", "bugreports")


def project_urls(distribution: str = "accelbackends") -> list[str]:
    """The ``Project-URL`` entries (``"Label, https://..."``) of ``distribution``'s installed
    metadata (``[project.urls]`` in its pyproject), empty where it has none."""
    from importlib import metadata

    try:
        return list(metadata.metadata(distribution).get_all("Project-URL") or [])
    except metadata.PackageNotFoundError:
        return []


def issue_tracker(urls: Sequence[str]) -> str | None:
    """The address of the issue tracker among ``Project-URL`` entries, or None."""
    for entry in urls:
        label, _, url = entry.partition(",")
        key = "".join(c for c in label.lower() if c not in " -_.")
        if key in _TRACKER_LABELS and url.strip():
            return url.strip()
    return None


def _where_to_report(urls: Sequence[str]) -> str:
    tracker = issue_tracker(urls)
    if tracker is not None:
        return f"paste everything below into a new issue at {tracker}"
    return (
        "paste everything below into a bug report; this accelbackends names no issue tracker "
        "(its package metadata has no Issues project URL), so send it to whoever provided it"
    )


def render_affinity(report: Mapping[str, Any]) -> list[str]:
    """The CPU affinity plan (`affinity.collect`) as lines for ``info``."""
    ranks = report["local_world_size"]
    who = f"{ranks} local {plural(ranks, 'rank')} of {report['accelerator']}"
    if report["applied"]:
        head = f"cpu affinity: {report['mode']} ({affinity.CPU_AFFINITY}), {who}:"
    else:
        head = f"cpu affinity: off ({affinity.CPU_AFFINITY}=on would pin {who} like this):"
    lines = [head]
    if report["error"]:
        return [*lines, f"  {report['error']}"]
    nodes = report["numa_nodes"]
    lines.append(
        f"  allowed CPUs {report['allowed']} (from {report['allowed_from']}); "
        f"SMT {'on' if report['smt'] else 'off'}; "
        + (
            "NUMA " + ", ".join(f"{n}: {cpus}" for n, cpus in nodes.items())
            if nodes
            else "no NUMA nodes shown"
        )
    )
    rows = [["local rank", "device", "numa node", "cpus", "locality"]]
    rows += [
        [
            str(r["local_rank"]),
            r["device"],
            "-" if r["numa_node"] is None else str(r["numa_node"]),
            f"{r['cpus']} ({r['cpu_count']})",
            r["locality"],
        ]
        for r in report["ranks"]
    ]
    lines += aligned(rows, "  ")
    lines += [f"  note: {note}" for note in report["notes"]]
    return lines
