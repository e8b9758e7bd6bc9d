"""Built-in accelerator plugins, one module each; each is an ordinary plugin.

``BUILTIN`` lists them as (plugin name, module path); the registry imports and registers them
through the same path as third-party plugins.
"""

from __future__ import annotations

BUILTIN: tuple[tuple[str, str], ...] = (("cpu", "accelbackends.accelerators.cpu"),)
