"""Built-in accelerator plugins, one module each; each is an ordinary plugin.

``BUILTIN`` lists them as (plugin name, module path); the registry imports and registers them
through the same path as third-party plugins. Their priorities, and why, are in
``docs/accelerators.md``: cuda 300, hpu 200, xpu 100, cpu 0. Modules starting with ``_`` hold
what the plugins share (visible-device parsing, package metadata, sysfs reading, NVML).
"""

from __future__ import annotations

BUILTIN: tuple[tuple[str, str], ...] = (
    ("cpu", "accelbackends.accelerators.cpu"),
    ("cuda", "accelbackends.accelerators.cuda"),
    ("xpu", "accelbackends.accelerators.xpu"),
    ("hpu", "accelbackends.accelerators.hpu"),
)
