"""The host's default answers to the policy hooks; every one is asked last (``trylast``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..plugin.hookspecs import hookimpl
from ..plugin.types import AcceleratorSpec, AcceleratorStatus, BackendOptions, Choice, ClusterInfo


@hookimpl(trylast=True)
def accelbackends_select_accelerator(
    candidates: Sequence[AcceleratorStatus], env: Mapping[str, str]
) -> Choice | None:
    """Highest priority among the available candidates; ties broken by name, never by order."""
    available = sorted(
        (c for c in candidates if c.available), key=lambda c: (-c.spec.priority, c.name)
    )
    if not available:
        return None
    best = available[0]
    if len(available) == 1:
        return Choice(best.name, f"the only available accelerator (priority {best.spec.priority})")
    ranking = ", ".join(f"{c.name} {c.spec.priority}" for c in available)
    return Choice(best.name, f"highest priority among available accelerators ({ranking})")


@hookimpl(trylast=True)
def accelbackends_backend_options(
    accelerator: AcceleratorSpec, options: BackendOptions, cluster: ClusterInfo
) -> BackendOptions:
    """The accelerator's own options, unchanged."""
    return options
