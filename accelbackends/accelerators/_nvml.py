"""Asking NVML which NVIDIA GPUs exist, without CUDA: no device context, safe before ``fork``.

NVML answers through NVIDIA's own binding (``pynvml`` from ``nvidia-ml-py``, the ``cuda`` extra)
where it is installed, else through a minimal ctypes load of ``libnvidia-ml.so.1``. Both go
through one reader that uses pynvml's function names, so a fake NVML (``accelbackends.testing
.nvml``) drives the same code.

``ACCELBACKENDS_NVML`` chooses the source: ``auto`` (default), ``off``, or the name of a module
with pynvml's functions. Under ``auto``, NVML is asked only when the probe looks at the real
root ``/``: a probe pointed at a fake tree must not report the host's GPUs.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..plugin import Probe, config
from ..plugin.errors import first_line

__all__ = ["NVML", "Gpu", "NvmlReport", "query"]

NVML = config.NVML
_LIBRARY = "libnvidia-ml.so.1"
_MODULE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_OFF = frozenset({"off", "0", "false", "no"})
_AUTO = frozenset({"auto", "on", "1", "true", "yes"})


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


class _NvmlCallError(Exception):
    pass


class _CtypesNvml:
    """The few NVML calls the probe needs, with pynvml's names, over ``libnvidia-ml.so.1``."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._lib = library
        self._lib.nvmlErrorString.restype = ctypes.c_char_p

    def _call(self, function: str, *args: Any) -> None:
        code = getattr(self._lib, function)(*args)
        if code != 0:
            message = self._lib.nvmlErrorString(code)
            text = message.decode(errors="replace") if message else f"error {code}"
            raise _NvmlCallError(f"{function}: {text}")

    def nvmlInit(self) -> None:
        self._call("nvmlInit_v2")

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        buffer = ctypes.create_string_buffer(96)
        self._call("nvmlSystemGetDriverVersion", buffer, ctypes.c_uint(96))
        return buffer.value.decode(errors="replace")

    def nvmlDeviceGetCount(self) -> int:
        count = ctypes.c_uint(0)
        self._call("nvmlDeviceGetCount_v2", ctypes.byref(count))
        return count.value

    def nvmlDeviceGetHandleByIndex(self, index: int) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
        return handle

    def _text(self, function: str, handle: ctypes.c_void_p) -> str:
        buffer = ctypes.create_string_buffer(96)
        self._call(function, handle, buffer, ctypes.c_uint(96))
        return buffer.value.decode(errors="replace")

    def nvmlDeviceGetName(self, handle: ctypes.c_void_p) -> str:
        return self._text("nvmlDeviceGetName", handle)

    def nvmlDeviceGetUUID(self, handle: ctypes.c_void_p) -> str:
        return self._text("nvmlDeviceGetUUID", handle)

    def nvmlDeviceGetMigMode(self, handle: ctypes.c_void_p) -> list[int]:
        current, pending = ctypes.c_uint(0), ctypes.c_uint(0)
        self._call("nvmlDeviceGetMigMode", handle, ctypes.byref(current), ctypes.byref(pending))
        return [current.value, pending.value]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: ctypes.c_void_p) -> int:
        count = ctypes.c_uint(0)
        self._call("nvmlDeviceGetMaxMigDeviceCount", handle, ctypes.byref(count))
        return count.value

    def nvmlDeviceGetMigDeviceHandleByIndex(
        self, handle: ctypes.c_void_p, index: int
    ) -> ctypes.c_void_p:
        mig = ctypes.c_void_p()
        self._call(
            "nvmlDeviceGetMigDeviceHandleByIndex", handle, ctypes.c_uint(index), ctypes.byref(mig)
        )
        return mig


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
        try:
            import pynvml  # type: ignore[import-not-found, unused-ignore]
        except Exception:
            try:
                library = ctypes.CDLL(_LIBRARY)
            except OSError:
                return NvmlReport(None, error=f"{_LIBRARY} not found")
            return _read(_CtypesNvml(library), _LIBRARY)
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
