"""A fake NVML with the functions of NVIDIA's ``pynvml`` that the CUDA probe calls.

Select it with ``ACCELBACKENDS_NVML=accelbackends.testing.nvml``; the probe then asks it
instead of the real NVML, whatever its root. Say which GPUs it lists with `configure` in
this process, or with the ``FAKESTACK_NVML`` variable (from `environment`) in a child:

```python
nvml.configure([nvml.FakeGpu(uuid="GPU-1111")], driver="550.54.15")
probe = FakeTree(tmp_path).probe({"ACCELBACKENDS_NVML": nvml.MODULE})
```

Handles are plain values: an int for a GPU, ``(gpu, slot)`` for a MIG device.
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
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetName",
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
    """

    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    name: str = "NVIDIA H100 80GB HBM3"
    mig: tuple[str, ...] = field(default_factory=tuple)


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
    gpus = [FakeGpu(gpu["uuid"], gpu["name"], tuple(gpu.get("mig", ()))) for gpu in data["gpus"]]
    return _State(gpus, data.get("driver", "550.54.15"), data.get("failure"))


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
