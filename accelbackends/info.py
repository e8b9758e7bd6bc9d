"""What ``accelbackends info`` reports: plugins, detection, selection, cluster, overrides, versions.

Everything here is read without importing torch: torch's version comes from its installed
metadata.
"""

from __future__ import annotations

import platform
from typing import Any

from . import affinity, membership
from .plugin import config
from .plugin.packages import installed
from .plugin.text import aligned
from .registry import Registry
from .selection import select

__all__ = ["collect", "render"]


def _installed_version(distribution: str) -> str | None:
    found = installed(distribution)
    return found.version if found else None


def collect(registry: Registry, *, show_all: bool = False) -> dict[str, Any]:
    """The report as plain data (what ``info --json`` prints)."""
    from ._version import __version__

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
    candidates = registry.detect()
    accelerators = [
        {
            "name": c.name,
            "plugin": c.plugin,
            "available": c.available,
            "device_count": c.detection.device_count,
            "priority": c.spec.priority,
            "backends": list(c.spec.backends),
            "default_backend": c.spec.default_backend,
            "reason": c.detection.reason,
        }
        for c in candidates
    ]
    selection = select(registry=registry)
    cluster = registry.cluster_environment()
    return {
        "plugins": plugins,
        "accelerators": accelerators,
        "selected": {
            "accelerator": selection.accelerator,
            "backend": selection.backend,
            "reason": selection.reason,
            "backend_reason": selection.backend_reason,
        },
        "cluster": {
            "launcher": cluster.launcher,
            "rank": cluster.rank,
            "world_size": cluster.world_size,
            "local_rank": cluster.local_rank,
            "local_world_size": cluster.local_world_size,
            "node_rank": cluster.node_rank,
            "master_addr": cluster.master_addr,
            "master_port": cluster.master_port,
            "sources": dict(cluster.sources),
        },
        "membership": membership.describe(registry.env),
        "cpu_affinity": affinity.collect(registry, selection.status, cluster),
        "overrides": config.overrides(registry.env),
        "versions": {
            "python": platform.python_version(),
            "torch": _installed_version("torch"),
            "pluggy": _installed_version("pluggy"),
            "accelbackends": __version__,
        },
    }


def render(report: dict[str, Any]) -> str:
    """The report as text for a terminal."""
    lines: list[str] = []
    selected = report["selected"]
    lines.append(f"selected: {selected['accelerator']} with {selected['backend']}")
    lines.append(f"  why: {selected['reason']}; backend: {selected['backend_reason']}")
    lines.append("")
    lines.append("accelerators:")
    rows = [["name", "available", "devices", "priority", "backends", "plugin", "reason"]]
    for acc in report["accelerators"]:
        backends = ",".join(f"{b}*" if b == acc["default_backend"] else b for b in acc["backends"])
        rows.append(
            [
                acc["name"],
                "yes" if acc["available"] else "no",
                str(acc["device_count"]),
                str(acc["priority"]),
                backends,
                acc["plugin"],
                acc["reason"],
            ]
        )
    lines += aligned(rows, "  ")
    lines.append("  (* default backend)")
    lines.append("")
    cluster = report["cluster"]
    lines.append(f"cluster: {cluster['launcher']}")
    sources = cluster["sources"]
    rows = []
    for key in (
        "rank",
        "world_size",
        "local_rank",
        "local_world_size",
        "node_rank",
        "master_addr",
        "master_port",
    ):
        value = cluster[key]
        rows.append(
            [
                key,
                "-" if value is None else str(value),
                f"from {sources[key]}" if key in sources else "",
            ]
        )
    lines += aligned(rows, "  ")
    lines.append("")
    lines += [*affinity.render(report["cpu_affinity"]), ""]
    plugins = report["plugins"]
    lines.append(
        "plugins:" if plugins else "plugins: none besides the built-ins (--all lists them)"
    )
    if plugins:
        rows = [["name", "distribution", "version", "status", "error"]]
        rows += [
            [p["name"], p["distribution"] or "-", p["version"] or "-", p["status"], p["error"]]
            for p in plugins
        ]
        lines += aligned(rows, "  ")
    lines.append("")
    lines.append(f"membership: {report['membership']}")
    lines.append("")
    overrides = report["overrides"]
    lines.append("overrides:" if overrides else "overrides: none (no ACCELBACKENDS_* variable set)")
    lines += [f"  {key}={value}" for key, value in overrides.items()]
    versions = report["versions"]
    lines.append("")
    lines.append(
        "versions: "
        + ", ".join(f"{name} {version or 'not installed'}" for name, version in versions.items())
    )
    return "\n".join(lines)
