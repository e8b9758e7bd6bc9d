"""NVML's few calls that the CUDA probe needs, over a ctypes load of ``libnvidia-ml.so.1``,
with pynvml's names, for nodes without NVIDIA's ``pynvml`` binding. Imported only when NVML is
asked and ``pynvml`` is missing: ctypes is not free to import."""

from __future__ import annotations

import ctypes
from typing import Any

__all__ = ["LIBRARY", "load"]

LIBRARY = "libnvidia-ml.so.1"


def load() -> _CtypesNvml | None:
    """The library, or None where it cannot be loaded."""
    try:
        return _CtypesNvml(ctypes.CDLL(LIBRARY))
    except OSError:
        return None


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

    def _uint(self, function: str, handle: ctypes.c_void_p, *args: int) -> int:
        value = ctypes.c_uint(0)
        self._call(function, handle, *(ctypes.c_uint(a) for a in args), ctypes.byref(value))
        return value.value

    # The link facts `info` and `check` read (nvml.h's signatures: the handle, then unsigned
    # int arguments, then the unsigned int answer).
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: ctypes.c_void_p) -> int:
        return self._uint("nvmlDeviceGetCurrPcieLinkGeneration", handle)

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: ctypes.c_void_p) -> int:
        return self._uint("nvmlDeviceGetCurrPcieLinkWidth", handle)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: ctypes.c_void_p) -> int:
        return self._uint("nvmlDeviceGetMaxPcieLinkGeneration", handle)

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: ctypes.c_void_p) -> int:
        return self._uint("nvmlDeviceGetMaxPcieLinkWidth", handle)

    def nvmlDeviceGetNvLinkState(self, handle: ctypes.c_void_p, link: int) -> int:
        return self._uint("nvmlDeviceGetNvLinkState", handle, link)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: ctypes.c_void_p) -> int:
        return self._uint("nvmlDeviceGetRetiredPagesPendingStatus", handle)
