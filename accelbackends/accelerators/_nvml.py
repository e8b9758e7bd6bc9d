"""Asking NVML which NVIDIA GPUs exist, without CUDA: no device context, safe before ``fork``.

NVML answers through NVIDIA's own binding (``pynvml`` from ``nvidia-ml-py``, the ``cuda`` extra)
where it is installed, else through a minimal ctypes load of ``libnvidia-ml.so.1``. Both go
through one reader that uses pynvml's function names, so a fake NVML (``accelbackends.testing
.nvml``) drives the same code.

``ACCELBACKENDS_NVML`` chooses the source: ``auto`` (default), ``off``, or the name of a module
with pynvml's functions. Under ``auto``, NVML is asked only when the probe looks at the real
root ``/``: a probe pointed at a fake tree must not report the host's GPUs; and only where the
NVIDIA driver shows itself (`DRIVER_SIGNS`): without it NVML cannot answer, and a node without
NVIDIA GPUs then loads neither the binding nor ctypes.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..plugin import Probe, config
from ..plugin.errors import first_line

__all__ = ["NVML", "Gpu", "GpuLinks", "NvmlReport", "query", "query_links", "session"]

NVML = config.NVML
_MODULE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_OFF = frozenset({"off", "0", "false", "no"})
_AUTO = frozenset({"auto", "on", "1", "true", "yes"})
#: Where the NVIDIA kernel driver shows itself. NVML talks to the driver through these (WSL2
#: through /dev/dxg), so where none exists it cannot answer, and ``auto`` does not load it.
DRIVER_SIGNS = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/dxg")


@dataclass(frozen=True)
class Gpu:
    """A GPU as NVML lists it; ``mig`` holds the UUIDs of its MIG devices, if MIG is on."""

    name: str
    uuid: str
    mig: tuple[str, ...] = ()


@dataclass(frozen=True)
class NvmlReport:
    """NVML's answer: ``gpus`` is None where NVML could not answer, and ``error`` says why."""

    gpus: tuple[Gpu, ...] | None
    source: str = ""
    driver: str = ""
    error: str = ""


def _text(value: object) -> str:
    """pynvml returns bytes before nvidia-ml-py 11.5 and str after."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _mig_devices(nvml: Any, handle: Any) -> tuple[str, ...]:
    try:
        current, _ = nvml.nvmlDeviceGetMigMode(handle)
    except Exception:  # not a MIG-capable GPU
        return ()
    if not current:
        return ()
    uuids = []
    for slot in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except Exception:  # an empty slot
            continue
        uuids.append(_text(nvml.nvmlDeviceGetUUID(mig)))
    return tuple(uuids)


#: Within `session`: the process that opened it and the bindings it initialised, by name.
_open: tuple[int, dict[str, Any]] | None = None
_open_lock = threading.Lock()


@contextlib.contextmanager
def session() -> Iterator[None]:
    """Within it, NVML is initialised once for every query of this process (detection, then
    links and health: ``info``), and shut down on leaving. ``nvmlInit`` is the expensive call
    (tens of ms a GPU where persistence mode is off). Nested sessions are one session; a child
    forked inside one initialises NVML for itself and leaves the parent's alone."""
    global _open
    if _current() is not None:
        yield
        return
    _open = (os.getpid(), {})
    try:
        yield
    finally:
        with _open_lock:
            opened, _open = _open, None
        for nvml in opened[1].values():
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()


def _current() -> dict[str, Any] | None:
    found = _open
    return found[1] if found is not None and found[0] == os.getpid() else None


def _init(nvml: Any, source: str) -> None:
    """``nvmlInit``, unless this process's session already did (raises as it does). The lock
    is not held across the call: a probe abandoned inside it must not block the next one."""
    with _open_lock:
        opened = _current()
        if opened is not None and source in opened:
            return
    nvml.nvmlInit()
    with _open_lock:
        opened = _current()
        if opened is None:
            return
        if source in opened:  # another thread's query opened it meanwhile: keep one
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
            return
        opened[source] = nvml


def _shutdown(nvml: Any, source: str) -> None:
    """``nvmlShutdown``, unless a session holds NVML open for later queries."""
    with _open_lock:
        opened = _current()
        if opened is not None and source in opened:
            return
    with contextlib.suppress(Exception):
        nvml.nvmlShutdown()


def _read(nvml: Any, source: str) -> NvmlReport:
    try:
        _init(nvml, source)
    except Exception as exc:
        return NvmlReport(None, source, error=f"NVML ({source}) failed: {first_line(exc)}")
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        gpus = []
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append(
                Gpu(
                    _text(nvml.nvmlDeviceGetName(handle)),
                    _text(nvml.nvmlDeviceGetUUID(handle)),
                    _mig_devices(nvml, handle),
                )
            )
        return NvmlReport(tuple(gpus), source, driver)
    except Exception as exc:
        return NvmlReport(None, source, error=f"NVML ({source}) failed: {first_line(exc)}")
    finally:
        _shutdown(nvml, source)


def _binding(probe: Probe) -> tuple[Any, str] | str:
    """The NVML module to ask and its name, or why none is asked (`ACCELBACKENDS_NVML`)."""
    setting = (probe.env.get(NVML) or "auto").strip()
    if setting.lower() in _OFF:
        return f"NVML is turned off by {NVML}={setting}"
    if setting.lower() in _AUTO:
        if probe.root != Path("/"):
            return f"NVML not asked for a probe root other than / ({NVML})"
        if not any(os.path.exists(sign) for sign in DRIVER_SIGNS):
            *others, last = DRIVER_SIGNS
            signs = f"{', '.join(others)} or {last}" if others else last
            return f"no NVIDIA driver: no {signs}"
        try:
            import pynvml  # type: ignore[import-not-found, unused-ignore]
        except Exception:
            from ._nvml_ctypes import LIBRARY, load

            library = load()
            if library is None:
                return f"{LIBRARY} not found"
            return library, LIBRARY
        return pynvml, "pynvml"
    if not _MODULE.fullmatch(setting):
        return (
            f"{NVML}={setting!r} is not valid; use auto, off, or the name of a module "
            "with pynvml's functions"
        )
    try:
        module = importlib.import_module(setting)
    except Exception as exc:
        return f"{NVML}={setting}: cannot import it: {first_line(exc)}"
    return module, setting


def query(probe: Probe) -> NvmlReport:
    """The GPUs NVML lists, or why it could not say. Never raises."""
    found = _binding(probe)
    if isinstance(found, str):
        return NvmlReport(None, error=found)
    return _read(*found)


#: NVML's limit on NVLinks per GPU (``NVML_NVLINK_MAX_LINKS``, 18 on Hopper).
NVLINK_MAX_LINKS = 18
#: ``nvmlDeviceGetTotalEccErrors`` arguments: uncorrected errors since the driver loaded.
_ECC_UNCORRECTED, _ECC_VOLATILE = 1, 0
#: Throttle reasons that say the GPU is slowed by a fault, not by idling or its clocks
#: settings (nvml.h's ``nvmlClocksEventReason*``): HW slowdown, SW and HW thermal slowdown,
#: HW power brake.
_THROTTLE_FAULTS = {
    0x8: "HW slowdown",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
}


@dataclass(frozen=True)
class GpuLinks:
    """What NVML says of one GPU's links and health; ``missing`` says what it could not."""

    index: int
    name: str
    pci: str | None
    pcie: tuple[int | None, int | None, int | None, int | None]  # gen, width, max gen, max width
    nvlinks: int | None
    nvlinks_total: int | None
    health: tuple[str, ...]
    missing: dict[str, str]
    uuid: str | None = None


def _call(nvml: Any, function: str, *args: Any) -> Any:
    """``nvml.function(*args)``; raises AttributeError where this binding lacks it."""
    return getattr(nvml, function)(*args)


def _why(exc: Exception, source: str) -> str:
    if isinstance(exc, AttributeError):
        return f"not read: {source} does not offer it"
    return f"not read: NVML ({source}): {first_line(exc)}"


def _gpu_links(nvml: Any, source: str, index: int) -> GpuLinks:
    """One GPU's links and health, each fact read on its own: a fact NVML cannot give is said
    missing, with why, and the others are still read."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    missing: dict[str, str] = {}
    pci = _pci_address(nvml, source, handle, missing)
    pcie = _pcie_link(nvml, source, handle, missing)
    nvlinks, total = _nvlinks(nvml, source, handle, missing)
    health = _health(nvml, source, handle, missing)
    uuid: str | None = None
    try:
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    except Exception as exc:
        missing["uuid"] = _why(exc, source)
    return GpuLinks(
        index,
        _text(nvml.nvmlDeviceGetName(handle)),
        pci,
        pcie,
        nvlinks,
        total,
        tuple(health),
        missing,
        uuid,
    )


def _pci_address(nvml: Any, source: str, handle: Any, missing: dict[str, str]) -> str | None:
    try:
        info = _call(nvml, "nvmlDeviceGetPciInfo", handle)
    except Exception as exc:
        missing["pci"] = _why(exc, source)
        return None
    pci = _text(getattr(info, "busId", "")).lower() or None
    if pci is not None and len(pci.split(":")[0]) == 8:  # NVML pads the domain to 8 digits
        pci = pci[4:]
    return pci


def _pcie_link(
    nvml: Any, source: str, handle: Any, missing: dict[str, str]
) -> tuple[int | None, int | None, int | None, int | None]:
    pcie: list[int | None] = []
    for function in (
        "nvmlDeviceGetCurrPcieLinkGeneration",
        "nvmlDeviceGetCurrPcieLinkWidth",
        "nvmlDeviceGetMaxPcieLinkGeneration",
        "nvmlDeviceGetMaxPcieLinkWidth",
    ):
        try:
            pcie.append(int(_call(nvml, function, handle)))
        except Exception as exc:
            pcie.append(None)
            missing.setdefault("pcie", _why(exc, source))
    return pcie[0], pcie[1], pcie[2], pcie[3]


def _nvlinks(
    nvml: Any, source: str, handle: Any, missing: dict[str, str]
) -> tuple[int | None, int | None]:
    """NVLinks up and in all; (0, 0) where link 0 is not supported: a GPU without NVLink."""
    try:
        _call(nvml, "nvmlDeviceGetNvLinkState", handle, 0)
    except AttributeError as exc:
        missing["nvlink"] = _why(exc, source)
        return None, None
    except Exception:
        return 0, 0
    up = total = 0
    for link in range(NVLINK_MAX_LINKS):
        try:
            state = _call(nvml, "nvmlDeviceGetNvLinkState", handle, link)
        except Exception:  # beyond this GPU's links
            continue
        total += 1
        up += 1 if int(state) == 1 else 0
    return up, total


def _health(nvml: Any, source: str, handle: Any, missing: dict[str, str]) -> list[str]:
    """The faults NVML reports: uncorrected ECC errors, pages or rows waiting for a reset,
    throttling by a fault (not by idling)."""
    health: list[str] = []
    try:
        errors = int(
            _call(nvml, "nvmlDeviceGetTotalEccErrors", handle, _ECC_UNCORRECTED, _ECC_VOLATILE)
        )
        if errors:
            health.append(f"ECC: {errors} uncorrected memory errors since the driver loaded")
    except Exception as exc:  # ECC off, or not an ECC GPU
        missing["ecc"] = _why(exc, source)
    try:
        if int(_call(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", handle)):
            health.append("retired pages pending: the GPU needs a reset to retire them")
    except Exception as exc:  # Ampere and later remap rows instead
        missing["retired_pages"] = _why(exc, source)
    try:
        _, _, pending, failed = _call(nvml, "nvmlDeviceGetRemappedRows", handle)
        if failed:
            health.append("row remapping failed: the GPU has memory it cannot repair")
        elif pending:
            health.append("row remapping pending: the GPU needs a reset")
    except Exception as exc:
        missing["remapped_rows"] = _why(exc, source)
    try:
        reasons = int(_call(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle))
        faults = [text for bit, text in _THROTTLE_FAULTS.items() if reasons & bit]
        if faults:
            health.append(f"throttled: {', '.join(faults)} (reasons 0x{reasons:x})")
    except Exception as exc:
        missing["throttle"] = _why(exc, source)
    return health


def query_links(probe: Probe) -> tuple[list[GpuLinks] | None, str, str]:
    """Each GPU's links and health as NVML says them, the binding's name, and why NVML could not
    answer (``""`` where it did). Never raises."""
    found = _binding(probe)
    if isinstance(found, str):
        return None, "", found
    nvml, source = found
    try:
        _init(nvml, source)
    except Exception as exc:
        return None, source, f"NVML ({source}) failed: {first_line(exc)}"
    try:
        count = int(nvml.nvmlDeviceGetCount())
        return [_gpu_links(nvml, source, i) for i in range(count)], source, ""
    except Exception as exc:
        return None, source, f"NVML ({source}) failed: {first_line(exc)}"
    finally:
        _shutdown(nvml, source)
