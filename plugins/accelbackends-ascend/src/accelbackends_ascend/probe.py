"""The fast probe: device nodes, driver files and package metadata; no torch, no torch_npu.

The Ascend driver creates one ``/dev/davinci<N>`` node per NPU and three control nodes that
every process using an NPU opens as well: ``/dev/davinci_manager``, ``/dev/devmm_svm`` (shared
virtual memory) and ``/dev/hisi_hdc`` (host-device communication). A container needs all of
them passed in (``docker run --device ...``); the NPU nodes alone are not enough.

The driver's install path is recorded in ``/etc/ascend_install.info``
(``Driver_Install_Path_Param=...``, ``/usr/local/Ascend`` by default), and its release in
``<install path>/driver/version.info`` (``Version=...``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from accelbackends import plugin
from accelbackends.plugin import packages, sysfs

from .visible import VARIABLE, parse_visible

__all__ = [
    "CONTROL_NODES",
    "HABANA",
    "TORCH_NPU",
    "Devices",
    "cann_missing",
    "detect",
    "driver_version",
    "find_cann",
    "find_devices",
    "installed",
    "verdict",
]

#: The distribution that provides ``torch_npu`` (spelled ``torch-npu`` or ``torch_npu``).
TORCH_NPU = "torch_npu"
#: Habana's distribution, which registers its own ``hccl``.
HABANA = "habana-torch-plugin"
#: Control nodes the Ascend runtime opens besides the NPU's own node.
CONTROL_NODES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
#: Where CANN's ``set_env.sh`` says the toolkit is, and its default install paths (CANN 8 and
#: earlier ``ascend-toolkit/latest``, later releases ``cann``).
CANN_VARIABLES = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
CANN_PATHS = ("/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann")
#: The CANN library torch_npu links against first (its import fails without it).
CANN_LIBRARY = "lib64/libhccl.so"
_INSTALL_INFO = "/etc/ascend_install.info"
_DEFAULT_INSTALL_PATH = "/usr/local/Ascend"
_NPU_NODE = re.compile(r"davinci(\d+)")


@dataclass(frozen=True)
class Devices:
    """The NPU device nodes found (by device ID) and the control nodes that are missing."""

    ids: tuple[int, ...] = ()
    missing: tuple[str, ...] = ()


def find_devices(probe: plugin.Probe) -> Devices:
    nodes = sysfs.listing(probe.path("/dev"), _NPU_NODE.pattern)
    ids = sorted(int(m.group(1)) for node in nodes if (m := _NPU_NODE.fullmatch(node.name)))
    missing = tuple(node for node in CONTROL_NODES if not sysfs.exists(probe.path(node)))
    return Devices(tuple(ids), missing)


def driver_version(probe: plugin.Probe) -> str | None:
    """The installed Ascend driver's release (``24.1.rc1``), or None where none is recorded."""
    install = sysfs.read_keyed(probe.path(_INSTALL_INFO), "=").get("Driver_Install_Path_Param")
    base = install or _DEFAULT_INSTALL_PATH
    version_info = probe.path(f"{base.rstrip('/')}/driver/version.info")
    return sysfs.read_keyed(version_info, "=").get("Version") or None


def find_cann(probe: plugin.Probe) -> str | None:
    """The CANN toolkit directory that holds ``lib64/libhccl.so``, or None where none does."""
    candidates = [probe.env.get(name, "").strip() for name in CANN_VARIABLES]
    for base in [c for c in candidates if c] + list(CANN_PATHS):
        if sysfs.exists(probe.path(f"{base.rstrip('/')}/{CANN_LIBRARY}")):
            return base
    return None


def cann_missing(env: Mapping[str, str]) -> str:
    """What a missing CANN toolkit means for torch_npu, with what to do."""
    where = " or ".join(f"${name}" for name in CANN_VARIABLES) + " or " + " or ".join(CANN_PATHS)
    autoload_off = env.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "").strip() == "0"
    effect = (
        "import torch_npu fails"
        if autoload_off
        else "import torch fails while torch-npu is installed (torch loads it at import; "
        "TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns that off)"
    )
    return (
        f"Ascend's CANN toolkit is not installed (no {CANN_LIBRARY} under {where}): {effect}; "
        "install CANN and source its set_env.sh, or uninstall torch-npu"
    )


def installed(name: str, probe: plugin.Probe) -> str | None:
    """``name version`` of an installed distribution, from its metadata; None when absent."""
    found = packages.installed(name, paths=probe.packages)
    return None if found is None else str(found)


def _plural(count: int) -> str:
    return "1 Ascend NPU" if count == 1 else f"{count} Ascend NPUs"


def verdict(
    devices: Devices,
    driver: str | None,
    torch_npu: str | None,
    habana: str | None,
    env: Mapping[str, str],
    cann: str | None = "",
) -> plugin.Detection:
    """The detection verdict from what the probe found, with a reason that says what to do.

    ``cann``: the CANN toolkit directory, None where none was found ("" where not looked for).
    """
    driver_note = f"driver {driver}" if driver else "no driver version.info found"
    if not devices.ids:
        reason = "no Ascend NPU (no /dev/davinci<N> device nodes)"
        if driver:
            reason += (
                f"; the Ascend driver {driver} is installed, but no NPU node is visible here "
                "(not passed into this container?)"
            )
        if torch_npu:
            reason += f"; {torch_npu} is installed, but there is no NPU for it"
            if cann is None:
                reason += f", and {cann_missing(env)}"
        return plugin.Detection(False, 0, reason)
    found = f"{_plural(len(devices.ids))} as /dev/davinci* device nodes ({driver_note})"
    if devices.missing:
        return plugin.Detection(
            False,
            0,
            f"{found}, but {', '.join(devices.missing)} "
            f"{'is' if len(devices.missing) == 1 else 'are'} missing: the Ascend runtime opens "
            f"{', '.join(CONTROL_NODES)} besides the NPU's own node; pass them into the "
            "container too",
        )
    if torch_npu is None:
        return plugin.Detection(
            False,
            0,
            f"{found}, but torch_npu is not installed — install torch-npu, the release that "
            "matches your torch and CANN versions",
        )
    if cann is None:
        return plugin.Detection(False, 0, f"{found}; {torch_npu}, but {cann_missing(env)}")
    reason = f"{found}; {torch_npu}"
    if habana:
        reason += (
            f"; {habana} (Habana) is installed too and registers the same backend name "
            "'hccl': init() checks that torch_npu's is the one in use"
        )
    try:
        visible = parse_visible(env)
    except plugin.ConfigError as exc:
        return plugin.Detection(
            True, len(devices.ids), f"{reason}; but {exc} (init() will refuse it)"
        )
    if visible is None:
        return plugin.Detection(True, len(devices.ids), reason)
    shown = [i for i in visible if i < len(devices.ids)]
    reason += f"; {VARIABLE}={env[VARIABLE]!r} shows {len(shown)}"
    if len(shown) < len(visible):
        reason += (
            f" (IDs {', '.join(str(i) for i in visible if i >= len(devices.ids))} do not exist: "
            f"this node's NPUs are 0 to {len(devices.ids) - 1})"
        )
    return plugin.Detection(bool(shown), len(shown), reason)


def detect(probe: plugin.Probe) -> plugin.Detection:
    """The fast probe of the ``npu`` accelerator (see the module's docstring)."""
    return verdict(
        find_devices(probe),
        driver_version(probe),
        installed(TORCH_NPU, probe),
        installed(HABANA, probe),
        probe.env,
        find_cann(probe),
    )
