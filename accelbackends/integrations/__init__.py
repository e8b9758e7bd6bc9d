"""Integrations with the frameworks people train with, one module per framework.

Each module imports its framework only when one of its functions or classes is used; none of
the frameworks is a requirement of accelbackends.

- `lightning`: `AccelBackendsEnvironment`, a Lightning `ClusterEnvironment` for
  `lightning.fabric` and `lightning.pytorch`.
- `accelerate`: Accelerate and the transformers `Trainer` on the group accelbackends made.
- `deepspeed`: DeepSpeed on the accelerator accelbackends chose.
- `ray`: `TorchConfig`, Ray Train's workers on `accelbackends.init()`.
"""

from __future__ import annotations

__all__: list[str] = []
