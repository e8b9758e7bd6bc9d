"""A fake NVML with the functions of NVIDIA's ``pynvml`` that the CUDA probe calls.

Select it with ``ACCELBACKENDS_NVML=accelbackends.testing.nvml``; the probe then asks it
instead of the real NVML, whatever its root. Say which GPUs it lists with `configure` in
this process, or with the ``FAKESTACK_NVML`` variable (from `environment`) in a child:

```python
nvml.configure([nvml.FakeGpu(uuid="GPU-1111")], driver="550.54.15")
probe = FakeTree(tmp_path).probe({"ACCELBACKENDS_NVML": nvml.MODULE})
```

Handles are plain values: an int for a GPU, ``(gpu, slot)`` for a MIG device.

A GPU's links and health are fields of `FakeGpu`: its PCIe link (``pcie``), its NVLinks'
states (``nvlinks``; empty: a GPU without NVLink, as a PCIe card), uncorrected ECC errors,
pending retired pages and row remapping, and throttle reasons (nvml.h's bits):

```python
nvml.FakeGpu(name="NVIDIA H200", pcie=(5, 8, 5, 16), nvlinks=(1,) * 18, throttle=0x40)
```
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "ENV",
    "MODULE",
    "FakeGpu",
    "NVMLError",
    "configure",
    "environment",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetName",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetUUID",
    "nvmlInit",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "reset",
]

#: The value of ``ACCELBACKENDS_NVML`` that selects this module.
MODULE = __name__
#: The variable a child process reads its configuration from (JSON).
ENV = "FAKESTACK_NVML"


@dataclass(frozen=True)
class FakeGpu:
    """A GPU the fake NVML lists.

    Attributes:
        uuid: Its UUID, as `nvmlDeviceGetUUID` returns it.
        name: Its product name.
        mig: The UUIDs of its MIG devices; MIG is on when there is any.
        pci: Its PCI bus id as NVML writes it (``00000000:18:00.0``); None: NVML does not say.
        pcie: Its PCIe link: (generation, width, max generation, max width); None: NVML
            does not say.
        nvlinks: Each NVLink's state (1 up, 0 down); empty: a GPU without NVLink.
        ecc_uncorrected: Uncorrected ECC errors since the driver loaded.
        retired_pending: Whether retired pages wait for a reset.
        remapped: (row remapping pending, row remapping failed).
        throttle: The current throttle reasons, nvml.h's bits (0x40: HW thermal slowdown).
    """

    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    name: str = "NVIDIA H100 80GB HBM3"
    mig: tuple[str, ...] = field(default_factory=tuple)
    pci: str | None = None
    pcie: tuple[int, int, int, int] | None = (5, 16, 5, 16)
    nvlinks: tuple[int, ...] = ()
    ecc_uncorrected: int = 0
    retired_pending: bool = False
    remapped: tuple[bool, bool] = (False, False)
    throttle: int = 0


class NVMLError(Exception):
    """What the fake raises, as pynvml raises its ``NVMLError`` subclasses."""


@dataclass
class _State:
    gpus: list[FakeGpu]
    driver: str = "550.54.15"
    failure: str | None = None


_configured: _State | None = None


def configure(
    gpus: Sequence[FakeGpu], *, driver: str = "550.54.15", failure: str | None = None
) -> None:
    """List ``gpus`` from now on in this process; with ``failure``, ``nvmlInit`` raises it
    (e.g. ``"Driver/library version mismatch"``)."""
    global _configured
    _configured = _State(list(gpus), driver, failure)


def reset() -> None:
    """Forget `configure`; the configuration comes from ``FAKESTACK_NVML`` again."""
    global _configured
    _configured = None


def environment(
    gpus: Sequence[FakeGpu], *, driver: str = "550.54.15", failure: str | None = None
) -> dict[str, str]:
    """The variables that select and configure the fake NVML in a child process."""
    data = {"gpus": [asdict(gpu) for gpu in gpus], "driver": driver, "failure": failure}
    return {"ACCELBACKENDS_NVML": MODULE, ENV: json.dumps(data)}


def _state() -> _State:
    if _configured is not None:
        return _configured
    data = json.loads(os.environ.get(ENV) or '{"gpus": []}')
    gpus = [FakeGpu(**_fields(gpu)) for gpu in data["gpus"]]
    return _State(gpus, data.get("driver", "550.54.15"), data.get("failure"))


def _fields(gpu: dict[str, Any]) -> dict[str, Any]:
    """A GPU's fields from JSON, whose arrays come back as lists."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in gpu.items()}


def _gpu(handle: Any) -> FakeGpu:
    gpus = _state().gpus
    if not isinstance(handle, int) or not 0 <= handle < len(gpus):
        raise NVMLError("Invalid Argument")
    return gpus[handle]


def nvmlInit() -> None:
    state = _state()
    if state.failure:
        raise NVMLError(state.failure)


def nvmlShutdown() -> None:
    return None


def nvmlSystemGetDriverVersion() -> str:
    return _state().driver


def nvmlDeviceGetCount() -> int:
    return len(_state().gpus)


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    _gpu(index)
    return index


def nvmlDeviceGetName(handle: Any) -> str:
    if isinstance(handle, tuple):
        return f"{_gpu(handle[0]).name} MIG"
    return _gpu(handle).name


def nvmlDeviceGetUUID(handle: Any) -> str:
    if isinstance(handle, tuple):
        return _gpu(handle[0]).mig[handle[1]]
    return _gpu(handle).uuid


def nvmlDeviceGetMigMode(handle: Any) -> list[int]:
    mode = 1 if _gpu(handle).mig else 0
    return [mode, mode]


def nvmlDeviceGetMaxMigDeviceCount(handle: Any) -> int:
    return 7 if _gpu(handle).mig else 0


def nvmlDeviceGetMigDeviceHandleByIndex(handle: Any, index: int) -> tuple[int, int]:
    if index >= len(_gpu(handle).mig):
        raise NVMLError("Not Found")
    return (handle, index)


class _PciInfo:
    def __init__(self, bus_id: str) -> None:
        self.busId = bus_id


def _whole(handle: Any) -> FakeGpu:
    if isinstance(handle, tuple):
        raise NVMLError("Not Supported")  # a MIG device has no links of its own
    return _gpu(handle)


def nvmlDeviceGetPciInfo(handle: Any) -> _PciInfo:
    gpu = _whole(handle)
    if gpu.pci is None:
        raise NVMLError("Not Supported")
    return _PciInfo(gpu.pci)


def _pcie(handle: Any, which: int) -> int:
    pcie = _whole(handle).pcie
    if pcie is None:
        raise NVMLError("Not Supported")
    return pcie[which]


def nvmlDeviceGetCurrPcieLinkGeneration(handle: Any) -> int:
    return _pcie(handle, 0)


def nvmlDeviceGetCurrPcieLinkWidth(handle: Any) -> int:
    return _pcie(handle, 1)


def nvmlDeviceGetMaxPcieLinkGeneration(handle: Any) -> int:
    return _pcie(handle, 2)


def nvmlDeviceGetMaxPcieLinkWidth(handle: Any) -> int:
    return _pcie(handle, 3)


def nvmlDeviceGetNvLinkState(handle: Any, link: int) -> int:
    links = _whole(handle).nvlinks
    if not 0 <= link < len(links):
        raise NVMLError("Not Supported")
    return links[link]


def nvmlDeviceGetTotalEccErrors(handle: Any, error_type: int, counter_type: int) -> int:
    return _whole(handle).ecc_uncorrected if error_type == 1 else 0


def nvmlDeviceGetRetiredPagesPendingStatus(handle: Any) -> int:
    return int(_whole(handle).retired_pending)


def nvmlDeviceGetRemappedRows(handle: Any) -> tuple[int, int, int, int]:
    pending, failed = _whole(handle).remapped
    return (0, 0, int(pending), int(failed))


def nvmlDeviceGetCurrentClocksThrottleReasons(handle: Any) -> int:
    return _whole(handle).throttle
