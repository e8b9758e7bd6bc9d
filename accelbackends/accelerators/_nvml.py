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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..plugin import Probe, config
from ..plugin.errors import first_line

__all__ = ["NVML", "Gpu", "NvmlReport", "query"]

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


def _read(nvml: Any, source: str) -> NvmlReport:
    try:
        nvml.nvmlInit()
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
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def query(probe: Probe) -> NvmlReport:
    """The GPUs NVML lists, or why it could not say. Never raises."""
    setting = (probe.env.get(NVML) or "auto").strip()
    if setting.lower() in _OFF:
        return NvmlReport(None, error=f"NVML is turned off by {NVML}={setting}")
    if setting.lower() in _AUTO:
        if probe.root != Path("/"):
            return NvmlReport(None, error=f"NVML not asked for a probe root other than / ({NVML})")
        if not any(os.path.exists(sign) for sign in DRIVER_SIGNS):
            *others, last = DRIVER_SIGNS
            signs = f"{', '.join(others)} or {last}" if others else last
            return NvmlReport(None, error=f"no NVIDIA driver: no {signs}")
        try:
            import pynvml  # type: ignore[import-not-found, unused-ignore]
        except Exception:
            from ._nvml_ctypes import LIBRARY, load

            library = load()
            if library is None:
                return NvmlReport(None, error=f"{LIBRARY} not found")
            return _read(library, LIBRARY)
        return _read(pynvml, "pynvml")
    if not _MODULE.fullmatch(setting):
        return NvmlReport(
            None,
            error=f"{NVML}={setting!r} is not valid; use auto, off, or the name of a module "
            "with pynvml's functions",
        )
    try:
        module = importlib.import_module(setting)
    except Exception as exc:
        return NvmlReport(None, error=f"{NVML}={setting}: cannot import it: {first_line(exc)}")
    return _read(module, setting)
