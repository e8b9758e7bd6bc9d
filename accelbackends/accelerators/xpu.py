"""Intel GPUs: torch's ``xpu`` device, with ``xccl`` where torch provides it, else oneCCL's ``ccl``.

The fast probe reads ``/sys/class/drm``: a render node whose PCI device has vendor ``0x8086`` and
is driven by ``xe`` or ``i915``. Intel places integrated graphics at PCI slot ``0000:00:02.0``;
any other slot is a discrete card. The torch build decides the rest: torch ships ``xccl`` in
its XPU wheels from 2.8; before that, ``oneccl_bindings_for_pytorch`` (distribution
``oneccl_bind_pt``) registers ``ccl``. ``intel_extension_for_pytorch`` alone provides no device
and never makes this accelerator available.
"""

from __future__ import annotations

import os
import re
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
    config,
    gloo_or,
    hookimpl,
    sysfs,
)
from ..plugin.devices import device_index, ze_visible
from ..plugin.locality import pci_locality, visible_localities
from ..plugin.packages import Installed, TorchBuild, installed, torch_build
from ..plugin.torchcompat import backend_plugins, is_xccl_available

__all__ = [
    "INTEL_VENDOR",
    "ONECCL",
    "PRIORITY",
    "XCCL_FROM",
    "IntelGpu",
    "backend_plan",
    "ccl_environment",
    "find_gpus",
    "ipex_note",
    "make_spec",
    "verdict",
]

#: Below CUDA (an integrated Intel GPU beside a discrete NVIDIA GPU must not win) and below
#: Gaudi (a dedicated training accelerator), above the CPU.
PRIORITY = 100
INTEL_VENDOR = "0x8086"
#: The first torch release whose XPU wheels ship the built-in ``xccl`` backend.
XCCL_FROM = (2, 8)
#: The distribution that installs ``oneccl_bindings_for_pytorch``.
ONECCL = "oneccl_bind_pt"
# Intel ended IPEX after its 2.8 release and archived its repository, with the oneCCL bindings;
# Accelerate and DeepSpeed removed both. torch's own xccl (2.8+) replaces them.
_ONECCL_END = (
    "end of life: Intel discontinued its oneCCL bindings and IPEX after 2.8; torch 2.8+ has xccl"
)
_IPEX = "intel_extension_for_pytorch"
_RELEASE = re.compile(r"(\d+)\.(\d+)")
_DRIVERS = ("xe", "i915")
_INTEGRATED_SLOT = "0000:00:02.0"


@dataclass(frozen=True)
class IntelGpu:
    """An Intel GPU render node: ``renderD128``, its kernel driver and its PCI slot."""

    node: str
    driver: str
    slot: str

    @property
    def integrated(self) -> bool:
        return self.slot == _INTEGRATED_SLOT


def find_gpus(probe: Probe) -> list[IntelGpu]:
    """Intel render nodes in ``/sys/class/drm`` driven by ``xe`` or ``i915``."""
    gpus = []
    for render in sysfs.listing(probe.path("/sys/class/drm"), r"renderD\d+"):
        device = render / "device"
        if (sysfs.read(device / "vendor") or "").lower() != INTEL_VENDOR:
            continue
        uevent = sysfs.read_keyed(device / "uevent", "=")
        driver = sysfs.target_name(device / "driver") or uevent.get("DRIVER", "")
        if driver not in _DRIVERS:
            continue
        slot = uevent.get("PCI_SLOT_NAME") or sysfs.target_name(device) or ""
        gpus.append(IntelGpu(render.name, driver, slot))
    return gpus


def backend_plan(build: TorchBuild | None, oneccl: bool) -> str | None:
    """The backend this torch and vendor stack give the XPU: ``xccl`` from torch 2.8, else
    ``ccl`` where oneCCL's bindings are installed, else None."""
    if build is not None and build.release >= XCCL_FROM:
        return "xccl"
    return "ccl" if oneccl else None


def _describe(gpus: Sequence[IntelGpu]) -> str:
    discrete = sum(not gpu.integrated for gpu in gpus)
    kinds = [
        f"{n} {kind}"
        for n, kind in ((discrete, "discrete"), (len(gpus) - discrete, "integrated"))
        if n
    ]
    drivers = ", ".join(sorted({gpu.driver for gpu in gpus}))
    noun = "Intel GPU" if len(gpus) == 1 else "Intel GPUs"
    return f"{len(gpus)} {noun} ({' and '.join(kinds)}; {drivers}) in /sys/class/drm"


def verdict(
    gpus: Sequence[IntelGpu],
    build: TorchBuild | None,
    oneccl: Installed | None,
    ipex: Installed | None,
    env: Mapping[str, str],
) -> Detection:
    """The detection verdict from the render nodes, the installed packages and the environment."""
    if not gpus:
        reason = "no Intel GPU render node in /sys/class/drm"
        if ipex is not None:
            mismatch = ipex_note(ipex, build)
            reason += (
                f" ({mismatch}; it provides no device either)"
                if mismatch
                else f" ({_named(ipex)} is installed, but it provides no device)"
            )
        return Detection(False, 0, reason)
    found = _describe(gpus)
    if build is None:
        return Detection(False, 0, f"{found}, but torch is not installed — install torch")
    if build.known and build.xpu is None:
        note = ""
        if ipex is not None:
            note = f" ({ipex_note(ipex, build) or _named(ipex)}; IPEX alone does not provide one)"
        return Detection(
            False,
            0,
            f"{found}, but {build} has no XPU support{note} — install an XPU build of torch",
        )
    backend = backend_plan(build, oneccl is not None)
    if backend is None:
        return Detection(
            False,
            0,
            f"{found}, but {build} has no xccl backend (its XPU wheels ship it from "
            f"{XCCL_FROM[0]}.{XCCL_FROM[1]}) and oneccl_bindings_for_pytorch is not installed — "
            f"upgrade torch to {XCCL_FROM[0]}.{XCCL_FROM[1]} or later (or install {ONECCL}, "
            f"{_ONECCL_END})",
        )
    using = f"{backend} from {oneccl}" if backend == "ccl" else backend
    reason = f"{found}; {build} with {using}"
    if backend == "ccl":
        reason += f" ({_ONECCL_END})"
    try:
        visible = ze_visible(env)
    except ConfigError as exc:
        return Detection(True, len(gpus), f"{reason}; but {exc} (init() will refuse it)")
    shown = visible.count(len(gpus))
    if visible.restricted:
        reason += f"; {visible.describe()} shows {shown}"
    return Detection(True, shown, reason)


def _named(package: Installed) -> str:
    """``intel-extension-for-pytorch 2.8.0``: the name pip installs it by, whichever spelling its
    metadata uses (the 2.8.0 wheel says ``intel_extension_for_pytorch``)."""
    return f"{package.name.lower().replace('_', '-')} {package.version}"


def ipex_note(ipex: Installed, build: TorchBuild | None) -> str | None:
    """Whether IPEX was built for another torch than the installed one, in words, else None.

    Each IPEX release is built for the torch release of the same major.minor and refuses any
    other at import (IPEX 2.8.0 beside torch 2.13 prints that it needs PyTorch 2.8, then fails
    on its own exit call). Read from the versions alone, never by
    importing it.
    """
    match = _RELEASE.match(ipex.version)
    if build is None or match is None or build.release == (0, 0):
        return None
    wanted = (int(match.group(1)), int(match.group(2)))
    if wanted == build.release:
        return None
    return (
        f"{_named(ipex)} is built for torch {wanted[0]}.{wanted[1]}, this is "
        f"{build.release[0]}.{build.release[1]}"
    )


def _detect(probe: Probe) -> Detection:
    packages = probe.packages
    return verdict(
        find_gpus(probe),
        torch_build(packages),
        installed(ONECCL, paths=packages),
        installed(_IPEX, paths=packages),
        probe.env,
    )


def _locality(probe: Probe) -> list[Locality | None]:
    """Each render node's PCI function, through ``ZE_AFFINITY_MASK`` (a sub-device sits where
    its device does)."""
    physical = [
        pci_locality(probe.path(f"/sys/class/drm/{gpu.node}/device"), gpu.slot or gpu.node)
        for gpu in find_gpus(probe)
    ]
    try:
        return visible_localities(physical, ze_visible(probe.env))
    except ConfigError:
        return []


def _confirm() -> str | None:
    import torch

    if not torch.xpu.is_available():
        return (
            f"torch.xpu.is_available() is False (torch {torch.__version__}): the Intel GPU "
            "driver or the Level Zero runtime may be missing, or ZE_AFFINITY_MASK or "
            "ONEAPI_DEVICE_SELECTOR hides every device"
        )
    return None


def _bind(request: BindRequest) -> Any:
    import torch

    index = device_index(
        local_rank=request.local_rank,
        local_world_size=request.local_world_size,
        # Level Zero, not the mask, is the authority on the count: with
        # ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE a mask of tiles shows fewer devices than entries.
        count=torch.xpu.device_count(),
        visible=ze_visible(request.env),
        what="Intel GPUs",
        env=request.env,
    )
    torch.xpu.set_device(index)
    return torch.device("xpu", index)


def ccl_environment(request: OptionsRequest) -> dict[str, str]:
    """The ``CCL_*`` variables oneCCL needs when a launcher other than its own (Intel MPI's
    Hydra) starts the ranks, for those the user has not set: the local rank and size come from
    the cluster environment, and ``CCL_PROCESS_LAUNCHER=none`` tells oneCCL to use them."""
    wanted = {
        "CCL_PROCESS_LAUNCHER": "none",
        "CCL_LOCAL_RANK": str(request.cluster.local_rank),
        "CCL_LOCAL_SIZE": str(request.cluster.local_world_size),
    }
    return {key: value for key, value in wanted.items() if not request.env.get(key, "").strip()}


@gloo_or
def _backend_options(request: OptionsRequest) -> BackendOptions:
    import torch

    if request.backend == "xccl":
        if not is_xccl_available():
            raise InitError(
                f"torch {torch.__version__} was built without the xccl backend "
                f"(torch.distributed.is_xccl_available() is False); install {ONECCL} and set "
                f"{config.BACKEND}=ccl, or install an XPU build of torch "
                f"{XCCL_FROM[0]}.{XCCL_FROM[1]} or later"
            )
        # Gloo serves CPU tensors beside xccl's XPU tensors.
        return BackendOptions("cpu:gloo,xpu:xccl", request.timeout)
    env_defaults = ccl_environment(request)
    # oneCCL reads its variables once, when oneccl_bindings_for_pytorch loads (its module init
    # calls ProcessGroupCCL::cclInitOnce), so they must be in place before the import below,
    # not only when the core applies env_defaults just before init_process_group.
    for key, value in env_defaults.items():
        os.environ.setdefault(key, value)
    try:
        import oneccl_bindings_for_pytorch  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
    except Exception as exc:
        raise InitError(
            f"backend ccl needs oneccl_bindings_for_pytorch, which cannot be imported "
            f"({type(exc).__name__}: {exc}); install {ONECCL} matching torch {torch.__version__}"
        ) from exc
    if "CCL" not in backend_plugins():
        raise InitError(
            "oneccl_bindings_for_pytorch was imported but did not register the ccl backend "
            "with torch.distributed; its build may not match this torch"
        )
    # oneCCL serves both CPU and XPU tensors.
    return BackendOptions("cpu:ccl,xpu:ccl", request.timeout, env_defaults=env_defaults)


def make_spec(packages: Sequence[str] | None = None) -> AcceleratorSpec:
    """The XPU accelerator; its default backend follows the installed torch and oneCCL."""
    default = backend_plan(torch_build(packages), installed(ONECCL, paths=packages) is not None)
    return AcceleratorSpec(
        name="xpu",
        device_type="xpu",
        priority=PRIORITY,
        backends=("xccl", "ccl", "gloo"),
        default_backend=default or "xccl",
        detect=_detect,
        bind=_bind,
        backend_options=_backend_options,
        confirm=_confirm,
        description="Intel GPUs with xccl (torch >= 2.8) or oneCCL",
        locality=_locality,
    )


@hookimpl
def accelbackends_declare_accelerators() -> Sequence[AcceleratorSpec]:
    return [make_spec()]
