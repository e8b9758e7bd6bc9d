"""``accelbackends.plugin``: everything a plugin author imports, and nothing else.

A plugin (built-in or third-party) imports accelbackends only through this package: the hook
markers and specifications, the frozen values that cross the boundary, the errors, and the
helpers every accelerator plugin needs (reading sysfs under a [`Probe`][accelbackends.Probe] root,
installed-package and torch-build facts, visible-device variables and the local rank → device
mapping, the Gloo option fallback, the ``ACCELBACKENDS_*`` variables, and the one module that
touches torch's private attributes). It imports nothing else from accelbackends and never
imports torch at import time.

- `hookspecs`: the hooks a plugin may implement, and the ``hookimpl`` marker.
- `types`: the frozen values that cross the plugin boundary.
- `errors`: the package's own exception classes.
- `sysfs`: reading sysfs, procfs and device nodes under a probe's root, never raising.
- `devices`: visible-device variables and the local rank -> device mapping.
- `locality`: which NUMA node and CPUs a PCI device is attached to.
- `links`: what a node's devices and NICs are connected by, read from sysfs.
- `packages`: installed-package facts from package metadata, without importing a vendor stack.
- `options`: the backend options every plugin shares (`plain_options`, `gloo_or`).
- `config`: the ``ACCELBACKENDS_*`` variables and their strict parsing.
- `text`: wording for the reasons a plugin's probes give.
- `threads`: how many intra-op threads a rank uses.
- `torchcompat`: every private torch attribute the package touches, and every difference
  between the torch versions it supports.
- `installed`: entry points and distributions, cached on disk between processes (what
  `packages` reads, and the registry with it).

The runtime the host uses and plugins must not (the runner with a deadline, the wait for torch's
workers, importing torch, torch's build files) is one floor up, in `accelbackends.host`.

**Stability promise.** The names in ``__all__`` here and in the ``__all__`` of the submodules
`types`, `errors`, `hookspecs`, `sysfs`, `devices`, `packages`, `locality`, `links`, `options`,
`config` (the ``ACCELBACKENDS_*`` variables and their strict parsing), `text` and `threads` are
public:
within a major version they are neither removed nor changed incompatibly (new optional fields
and parameters may appear, with defaults). A removal is announced one minor release ahead with a
``DeprecationWarning``. Names starting with ``_`` are private. `torchcompat` follows torch: its
functions stay, but what they return is whatever the installed torch keeps there. `installed`
(the cached reader of entry points and distributions that `packages` and the registry share)
is not under the promise; it stays on this floor because `packages`, which plugins import,
reads through it.
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
