"""accelbackends: pick the accelerator, device and communication backend for PyTorch distributed
code through plugins, not ``if cuda … elif xpu … elif hpu`` chains.

``import accelbackends`` is cheap: nothing runs and nothing heavy is imported until a name is
used (PEP 562), and neither torch nor a vendor runtime is imported by ``detect()``, ``select()``
or ``accelbackends info``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .job.attach import attach
    from .job.lifecycle import destroy, distributed, init, is_initialized
    from .job.select import detect, select
    from .job.spawn import spawn
    from .plugin.errors import (
        AccelBackendsError,
        AccelBackendsWarning,
        ConfigError,
        InitError,
        PluginError,
        PluginWarning,
        RendezvousError,
        RendezvousWarning,
        SelectionError,
        SpawnError,
    )
    from .plugin.hookspecs import hookimpl
    from .plugin.types import (
        AcceleratorSpec,
        AcceleratorStatus,
        BackendOptions,
        BindRequest,
        Choice,
        ClusterInfo,
        Context,
        Detection,
        Locality,
        OptionsRequest,
        Probe,
        Selection,
    )
    from .registry.facade import PluginInfo, Registry, default_registry, reset

_EXPORTS = {
    "hookimpl": "plugin.hookspecs",
    "detect": "job.select",
    "select": "job.select",
    "attach": "job.attach",
    "init": "job.lifecycle",
    "destroy": "job.lifecycle",
    "distributed": "job.lifecycle",
    "is_initialized": "job.lifecycle",
    "spawn": "job.spawn",
    "Registry": "registry.facade",
    "PluginInfo": "registry.facade",
    "default_registry": "registry.facade",
    "reset": "registry.facade",
    **dict.fromkeys(
        (
            "AcceleratorSpec",
            "AcceleratorStatus",
            "BackendOptions",
            "BindRequest",
            "Choice",
            "ClusterInfo",
            "Detection",
            "Locality",
            "OptionsRequest",
            "Probe",
            "Context",
            "Selection",
        ),
        "plugin.types",
    ),
    **dict.fromkeys(
        (
            "AccelBackendsError",
            "AccelBackendsWarning",
            "ConfigError",
            "InitError",
            "PluginError",
            "PluginWarning",
            "RendezvousError",
            "RendezvousWarning",
            "SelectionError",
            "SpawnError",
        ),
        "plugin.errors",
    ),
}

__all__ = [
    "AccelBackendsError",
    "AccelBackendsWarning",
    "AcceleratorSpec",
    "AcceleratorStatus",
    "BackendOptions",
    "BindRequest",
    "Choice",
    "ClusterInfo",
    "ConfigError",
    "Context",
    "Detection",
    "InitError",
    "Locality",
    "OptionsRequest",
    "PluginError",
    "PluginInfo",
    "PluginWarning",
    "Probe",
    "Registry",
    "RendezvousError",
    "RendezvousWarning",
    "Selection",
    "SelectionError",
    "SpawnError",
    "__version__",
    "attach",
    "default_registry",
    "destroy",
    "detect",
    "distributed",
    "hookimpl",
    "init",
    "is_initialized",
    "reset",
    "select",
    "spawn",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'accelbackends' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
