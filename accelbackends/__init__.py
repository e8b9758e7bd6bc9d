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
    from .lifecycle import destroy, distributed, init, is_initialized
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
    from .registry import PluginInfo, Registry, default_registry, reset
    from .selection import detect, select
    from .spawning import spawn

_EXPORTS = {
    "hookimpl": "plugin.hookspecs",
    "detect": "selection",
    "select": "selection",
    "init": "lifecycle",
    "destroy": "lifecycle",
    "distributed": "lifecycle",
    "is_initialized": "lifecycle",
    "spawn": "spawning",
    "Registry": "registry",
    "PluginInfo": "registry",
    "default_registry": "registry",
    "reset": "registry",
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
