"""``accelbackends.plugin``: everything a plugin author imports, and nothing else.

A plugin (built-in or third-party) imports accelbackends only through this package: the hook
markers and specifications, the frozen values that cross the boundary, the errors, and the
helpers every accelerator plugin needs (reading sysfs under a :class:`Probe` root,
installed-package and torch-build facts, visible-device variables and the local rank → device
mapping, the Gloo option fallback, the ``ACCELBACKENDS_*`` variables, and the one module that
touches torch's private attributes). It imports nothing else from accelbackends and never
imports torch at import time.

**Stability promise.** The names in ``__all__`` here and in the ``__all__`` of the submodules
:mod:`~accelbackends.plugin.types`, :mod:`~accelbackends.plugin.errors`,
:mod:`~accelbackends.plugin.hookspecs`, :mod:`~accelbackends.plugin.sysfs`,
:mod:`~accelbackends.plugin.devices`, :mod:`~accelbackends.plugin.packages`,
:mod:`~accelbackends.plugin.options`, :mod:`~accelbackends.plugin.config` (the
``ACCELBACKENDS_*`` variables and their strict parsing) and :mod:`~accelbackends.plugin.text`
are public: within a major version they are neither removed nor changed incompatibly (new
optional fields and parameters may appear, with defaults). A removal is announced one minor
release ahead with a ``DeprecationWarning``. Names starting with ``_`` are private.
:mod:`~accelbackends.plugin.torchcompat` follows torch: its functions stay, but what they
return is whatever the installed torch keeps there.
"""

from __future__ import annotations

from . import config, devices, options, packages, sysfs, text, torchcompat
from .errors import (
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
from .hookspecs import hookimpl, hookspec
from .options import gloo_or, plain_options
from .types import (
    AcceleratorSpec,
    AcceleratorStatus,
    BackendOptions,
    BindRequest,
    Choice,
    ClusterInfo,
    Context,
    Detection,
    OptionsRequest,
    Probe,
    Selection,
)

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
    "OptionsRequest",
    "PluginError",
    "PluginWarning",
    "Probe",
    "RendezvousError",
    "RendezvousWarning",
    "Selection",
    "SelectionError",
    "SpawnError",
    "config",
    "devices",
    "gloo_or",
    "hookimpl",
    "hookspec",
    "options",
    "packages",
    "plain_options",
    "sysfs",
    "text",
    "torchcompat",
]
