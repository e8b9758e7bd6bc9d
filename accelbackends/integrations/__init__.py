"""Integrations with the frameworks people train with, one module per framework.

Each module imports its framework only when one of its functions or classes is used; none of
the frameworks is a requirement of accelbackends.

- `accelbackends.integrations.lightning`: `AccelBackendsEnvironment`, a Lightning
  `ClusterEnvironment` for `lightning.fabric` and `lightning.pytorch`.
- `accelbackends.integrations.accelerate`: Accelerate and the transformers `Trainer` on
  the group accelbackends made.
- `accelbackends.integrations.deepspeed`: DeepSpeed on the accelerator accelbackends chose.
- `accelbackends.integrations.ray`: `TorchConfig`, Ray Train's workers on `accelbackends.init()`.
"""

from __future__ import annotations

__all__: list[str] = []
