"""Built-in accelerator plugins, one module each; each is an ordinary plugin.

``BUILTIN`` lists them as (plugin name, module path); the registry imports and registers them
through the same path as third-party plugins. Their priorities, and why, are in
``docs/accelerators.md``: cuda 300, hpu 200, xpu 100, cpu 0.

- `cuda`: NVIDIA (CUDA) and AMD (ROCm) GPUs, torch's ``cuda`` device, with NCCL (RCCL).
- `hpu`: Intel Gaudi (Habana), torch's ``hpu`` device, with ``hccl``.
- `xpu`: Intel GPUs, torch's ``xpu`` device, with ``xccl`` or oneCCL's ``ccl``.
- `cpu`: CPU with Gloo, always available, the fallback.
- `_nvml`: asking NVML which NVIDIA GPUs exist, without CUDA (the cuda plugin's probe).
- `_nvml_ctypes`: NVML's few calls that probe needs, over ctypes, where ``pynvml`` is absent.
"""

from __future__ import annotations

BUILTIN: tuple[tuple[str, str], ...] = (
    ("cpu", "accelbackends.accelerators.cpu"),
    ("cuda", "accelbackends.accelerators.cuda"),
    ("xpu", "accelbackends.accelerators.xpu"),
    ("hpu", "accelbackends.accelerators.hpu"),
)
