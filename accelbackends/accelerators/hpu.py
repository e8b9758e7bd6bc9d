"""Intel Gaudi (Habana) accelerators: torch's ``hpu`` device, with ``hccl``.

The fast probe looks for Habana's PCI vendor ``0x1da3`` in ``/sys/class/accel`` (kernel 6.2 and
later move the driver into the accel subsystem) with a ``/dev/accel/accel*`` node for it, or for
the older ``/dev/hl*`` nodes. Each process acquires one module, chosen by ``HLS_MODULE_ID``,
which must be set before the runtime acquires a device; ``HABANA_VISIBLE_MODULES`` lists the
module IDs a node's ranks may take.

Ascend's ``torch_npu`` registers a backend under the same name ``hccl``, and
``Backend.register_backend`` silently replaces an earlier registration: init() checks that the
``hccl`` in use is Habana's rather than initialising the wrong stack.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..plugin import (
    AcceleratorSpec,
    BackendOptions,
    BindRequest,
    ConfigError,
    Detection,
    InitError,
    Locality,
    OptionsRequest,
    Probe,
    gloo_or,
    hookimpl,
    sysfs,
)
from ..plugin.devices import Visible, device_index, habana_visible
from ..plugin.locality import pci_locality, visible_localities
from ..plugin.packages import Installed, installed
from ..plugin.torchcompat import backend_plugins

__all__ = [
    "HABANA",
    "HABANA_VENDOR",
    "MODULE_ID",
    "PRIORITY",
    "SPEC",
    "Devices",
    "find_devices",
    "hccl_owner",
    "module_id_for",
    "verdict",
]

#: Below CUDA, above Intel GPUs: a Gaudi is a dedicated training accelerator, an Intel GPU may
#: be the integrated display adapter. Gaudi and NVIDIA GPUs do not share a node in practice.
PRIORITY = 200
HABANA_VENDOR = "0x1da3"
#: The distribution that installs ``habana_frameworks.torch``.
HABANA = "habana-torch-plugin"
_ASCEND = "torch_npu"
#: The module a process acquires; read by the runtime when it acquires the device.
MODULE_ID = "HLS_MODULE_ID"


@dataclass(frozen=True)
class Devices:
    """Gaudi devices this process can open, where they were found, or why there are none."""

    count: int = 0
    source: str = ""
    note: str = ""


def find_devices(probe: Probe) -> Devices:
    accel = [
        entry
        for entry in sysfs.listing(probe.path("/sys/class/accel"), r"accel\d+")
        if (sysfs.read(entry / "device" / "vendor") or "").lower() == HABANA_VENDOR
    ]
    if accel:
        opened = [e for e in accel if sysfs.exists(probe.path(f"/dev/accel/{e.name}"))]
        if opened:
            return Devices(len(opened), f"in /sys/class/accel (vendor {HABANA_VENDOR})")
        return Devices(
            0,
            note=f"{len(accel)} in /sys/class/accel, but no /dev/accel/accel* node for them "
            "(not mounted into this container?)",
        )
    legacy = sysfs.listing(probe.path("/dev"), r"hl\d+")
    if legacy:
        return Devices(len(legacy), "as /dev/hl* device nodes")
    return Devices(
        0, note=f"no /sys/class/accel device with vendor {HABANA_VENDOR} and no /dev/hl*"
    )


def verdict(
    devices: Devices,
    habana: Installed | None,
    ascend: Installed | None,
    env: Mapping[str, str],
) -> Detection:
    """The detection verdict from the device nodes, the installed packages and the environment."""
    if not devices.count:
        reason = f"no Gaudi device ({devices.note})"
        if habana is not None:
            reason += f"; {habana} is installed, but there is no device for it"
        return Detection(False, 0, reason)
    noun = "Gaudi device" if devices.count == 1 else "Gaudi devices"
    found = f"{devices.count} {noun} {devices.source}"
    if habana is None:
        return Detection(
            False,
            0,
            f"{found}, but habana_frameworks is not installed — install {HABANA} "
            "(Intel Gaudi software)",
        )
    reason = f"{found}; {habana}"
    if ascend is not None:
        reason += (
            f"; {ascend} (Ascend) is installed too and registers the same backend name 'hccl': "
            "init() checks that Habana's is the one in use"
        )
    try:
        visible = habana_visible(env)
    except ConfigError as exc:
        return Detection(True, devices.count, f"{reason}; but {exc} (init() will refuse it)")
    shown = visible.count(devices.count)
    if visible.restricted:
        reason += f"; {visible.describe()} shows {shown}"
    return Detection(True, shown, reason)


def _detect(probe: Probe) -> Detection:
    return verdict(
        find_devices(probe),
        installed(HABANA, paths=probe.packages),
        installed(_ASCEND, paths=probe.packages),
        probe.env,
    )


def _locality(probe: Probe) -> list[Locality | None]:
    """Each module's PCI function, indexed by module ID (local rank *i* takes module *i*, or
    entry *i* of ``HABANA_VISIBLE_MODULES``)."""
    by_module: dict[int, Locality | None] = {}
    for entry in sysfs.listing(probe.path("/sys/class/accel"), r"accel\d+"):
        device = entry / "device"
        module = sysfs.read(device / "module_id") or ""
        if (sysfs.read(device / "vendor") or "").lower() == HABANA_VENDOR and module.isdigit():
            by_module[int(module)] = pci_locality(device, entry.name)
    physical = [by_module.get(index) for index in range(max(by_module, default=-1) + 1)]
    try:
        return visible_localities(physical, habana_visible(probe.env))
    except ConfigError:
        return []


def _confirm() -> str | None:
    # Importing loads the bridge but acquires no device (Habana's own hccl module sets
    # HLS_MODULE_ID after this import); availability is asked in bind, once the module is chosen.
    try:
        import habana_frameworks.torch  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
    except Exception as exc:
        return f"import habana_frameworks.torch failed ({type(exc).__name__}: {exc})"
    return None


def module_id_for(request: BindRequest, visible: Visible) -> str:
    """The module ID this local rank acquires: the user's ``HLS_MODULE_ID``, else entry *i* of
    ``HABANA_VISIBLE_MODULES``, else *i* (Habana's own rule, local rank = module ID)."""
    chosen = request.env.get(MODULE_ID, "").strip()
    if chosen:
        if not chosen.isdigit():
            raise ConfigError(f"{MODULE_ID}={chosen!r} is not valid; use a module ID such as 0")
        return chosen
    if visible.restricted:
        index = device_index(
            local_rank=request.local_rank,
            local_world_size=request.local_world_size,
            count=len(visible.entries),
            visible=visible,
            what="Gaudi modules",
            env=request.env,
            one_per_rank_ok=False,
            shareable=False,
        )
        return visible.entries[index]
    return str(request.local_rank)


def _bind(request: BindRequest) -> Any:
    import torch

    visible = habana_visible(request.env)
    module = module_id_for(request, visible)
    os.environ[MODULE_ID] = module
    import habana_frameworks.torch.hpu as hthpu  # type: ignore[import-not-found, unused-ignore]

    # Without HABANA_VISIBLE_MODULES the node's module count is not known here without
    # asking the runtime, and the runtime's count after acquisition is no node-wide answer: a
    # local rank with no module of its own is refused by the runtime, below.
    if not hthpu.is_available():
        raise InitError(
            f"Gaudi devices were detected, but habana_frameworks.torch.hpu.is_available() is "
            f"False with {MODULE_ID}={module} (local rank {request.local_rank} of "
            f"{request.local_world_size}): the module may be taken by another process or missing "
            "from this node; list the modules to use in HABANA_VISIBLE_MODULES"
        )
    # Each process sees the one module it acquired as "hpu".
    return torch.device("hpu")


def hccl_owner(plugins: Mapping[str, Any], capability: Mapping[str, Sequence[str]]) -> str | None:
    """Why the registered ``hccl`` backend is not Habana's, or None when it is.

    Args:
        plugins: ``torch.distributed.Backend._plugins`` (creator functions by upper-case name).
        capability: ``torch.distributed.Backend.backend_capability`` (devices by name).
    """
    plugin = plugins.get("HCCL")
    if plugin is None:
        return "no backend named 'hccl' is registered"
    module = str(getattr(plugin.creator_fn, "__module__", "") or "")
    devices = list(capability.get("hccl", ()))
    if module.startswith("habana_frameworks") and "hpu" in devices:
        return None
    owner = "Ascend's torch_npu" if module.startswith("torch_npu") else f"module {module!r}"
    return (
        f"the backend name 'hccl' is registered by {owner} (devices {devices}), not by "
        "habana_frameworks: the last registration of a name wins, so this process would "
        "initialise the wrong stack. Do not import torch_npu in a Gaudi job (torch loads it "
        "through its device-backend entry point unless TORCH_DEVICE_BACKEND_AUTOLOAD=0), or "
        "uninstall it on Gaudi nodes"
    )


@gloo_or
def _backend_options(request: OptionsRequest) -> BackendOptions:
    import torch.distributed as dist

    try:
        import habana_frameworks.torch.distributed.hccl  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
    except Exception as exc:
        raise InitError(
            "backend hccl needs habana_frameworks.torch.distributed.hccl, which cannot be "
            f"imported ({type(exc).__name__}: {exc}); check the {HABANA} installation"
        ) from exc
    problem = hccl_owner(backend_plugins(), dist.Backend.backend_capability)
    if problem:
        raise InitError(problem)
    # Gloo serves CPU tensors beside HCCL's HPU tensors.
    return BackendOptions("cpu:gloo,hpu:hccl", request.timeout)


SPEC = AcceleratorSpec(
    name="hpu",
    device_type="hpu",
    priority=PRIORITY,
    backends=("hccl", "gloo"),
    default_backend="hccl",
    detect=_detect,
    bind=_bind,
    backend_options=_backend_options,
    confirm=_confirm,
    description="Intel Gaudi (Habana) accelerators with HCCL",
    locality=_locality,
)


@hookimpl
def accelbackends_declare_accelerators() -> Sequence[AcceleratorSpec]:
    return [SPEC]
