"""accelbackends: pick the accelerator, device and communication backend for PyTorch distributed
code through plugins, not ``if cuda … elif xpu … elif hpu`` chains.

``import accelbackends`` is cheap: nothing runs and nothing heavy is imported until a name is
used (PEP 562), and neither torch nor a vendor runtime is imported by ``detect()``, ``select()``
or ``accelbackends info``.

The folders are floors, each importing only from those below it (``docs/architecture.md``):

- `plugin`: floor 0, everything a plugin author imports (hooks, boundary types, errors, probe
  helpers, torch compatibility).
- `_version`: the package's version, on floor 0.
- `host`: floor 1, the runtime the package runs on and plugins never import (the runner with a
  deadline, the wait for torch's workers, importing torch).
- `accelerators`: the built-in accelerator plugins (cuda, hpu, xpu, cpu).
- `environments`: the built-in launcher plugins (torchrun, slurm, the MPIs, ray, skypilot, …).
- `rendezvous`: how the ranks meet: the store with deadlines, membership proof, secret, network.
- `registry`: the plugins loaded, and the one typed facade that calls their hooks.
- `job`: the steps of ``init()``: recognise, select, affinity, environ, lifecycle, attach,
  spawn.
- `integrations`: one module per framework (Lightning, Accelerate, DeepSpeed, Ray).
- `cli`: ``accelbackends info``, ``check`` and ``docs``.
- `__main__`: ``python -m accelbackends``, the same as the command.
- `testing`: fakes and a pytest plugin for plugin authors.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__ as __version__

if TYPE_CHECKING:
    # ``name as name``: an explicit re-export for type checkers, which cannot read ``__all__``
    # when it is computed from the table below. One statement per module (isort would split).
    # isort: off
    from .job.attach import (
        attach as attach,
    )
    from .job.lifecycle import (
        destroy as destroy,
        distributed as distributed,
        init as init,
        is_initialized as is_initialized,
    )
    from .job.select import (
        detect as detect,
        select as select,
    )
    from .job.spawn import (
        spawn as spawn,
    )
    from .plugin.errors import (
        AccelBackendsError as AccelBackendsError,
        AccelBackendsWarning as AccelBackendsWarning,
        ConfigError as ConfigError,
        InitError as InitError,
        PluginError as PluginError,
        PluginWarning as PluginWarning,
        RendezvousError as RendezvousError,
        RendezvousWarning as RendezvousWarning,
        SelectionError as SelectionError,
        SpawnError as SpawnError,
    )
    from .plugin.hookspecs import (
        hookimpl as hookimpl,
    )
    from .plugin.types import (
        AcceleratorSpec as AcceleratorSpec,
        AcceleratorStatus as AcceleratorStatus,
        BackendOptions as BackendOptions,
        BindRequest as BindRequest,
        Choice as Choice,
        ClusterInfo as ClusterInfo,
        Context as Context,
        Detection as Detection,
        Locality as Locality,
        OptionsRequest as OptionsRequest,
        Probe as Probe,
        Selection as Selection,
    )
    from .registry.facade import (
        PluginInfo as PluginInfo,
        Registry as Registry,
        default_registry as default_registry,
        reset as reset,
    )
    # isort: on

#: The public names, by the module that defines them: the one table that ``__all__`` and the
#: lazy imports below are made from (the ``TYPE_CHECKING`` imports above mirror it for type
#: checkers; tests/test_public_names.py holds the two together).
_PUBLIC: dict[str, tuple[str, ...]] = {
    "job.select": ("detect", "select"),
    "job.attach": ("attach",),
    "job.lifecycle": ("init", "destroy", "distributed", "is_initialized"),
    "job.spawn": ("spawn",),
    "registry.facade": ("Registry", "PluginInfo", "default_registry", "reset"),
    "plugin.hookspecs": ("hookimpl",),
    "plugin.types": (
        "AcceleratorSpec",
        "AcceleratorStatus",
        "BackendOptions",
        "BindRequest",
        "Choice",
        "ClusterInfo",
        "Context",
        "Detection",
        "Locality",
        "OptionsRequest",
        "Probe",
        "Selection",
    ),
    "plugin.errors": (
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
}
#: Public name → the module that defines it.
_EXPORTS = {name: module for module, names in _PUBLIC.items() for name in names}

__all__ = sorted(["__version__", *_EXPORTS])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'accelbackends' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
