"""``accelbackends.plugin``: everything a plugin author imports, and nothing else.

A plugin (built-in or third-party) imports accelbackends only through this package: the hook
markers and specifications, the frozen values that cross the boundary, the errors, and the
helpers every accelerator plugin needs (reading sysfs under a [`Probe`][accelbackends.Probe] root,
installed-package and torch-build facts, visible-device variables and the local rank → device
mapping, the Gloo option fallback, the ``ACCELBACKENDS_*`` variables, and the one module that
touches torch's private attributes). It imports nothing else from accelbackends and never
imports torch at import time.

**Stability promise.** The names in ``__all__`` here and in the ``__all__`` of the submodules
`types`, `errors`, `hookspecs`, `sysfs`, `devices`, `packages`, `locality`, `links`, `options`,
`config` (the ``ACCELBACKENDS_*`` variables and their strict parsing), `text` and `threads` are
public:
within a major version they are neither removed nor changed incompatibly (new optional fields
and parameters may appear, with defaults). A removal is announced one minor release ahead with a
``DeprecationWarning``. Names starting with ``_`` are private. `torchcompat` follows torch: its
functions stay, but what they return is whatever the installed torch keeps there. `installed`
(the cached reader of entry points and distributions that `packages` and the registry share)
is the host's, not under the promise.
"""

from __future__ import annotations

from . import config, devices, links, locality, options, packages, sysfs, text, threads, torchcompat
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
    DeviceLinks,
    Locality,
    Nic,
    OptionsRequest,
    PcieLink,
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
    "DeviceLinks",
    "InitError",
    "Locality",
    "Nic",
    "OptionsRequest",
    "PcieLink",
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
    "links",
    "locality",
    "options",
    "packages",
    "plain_options",
    "sysfs",
    "text",
    "threads",
    "torchcompat",
]
