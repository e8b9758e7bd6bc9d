"""Testing kit for accelerator plugins: drive the real plugin code without the hardware.

- :class:`FakeTree`: a fake machine (sysfs, procfs, ``/dev``) for probes and registries.
- :mod:`accelbackends.testing.nvml`: a fake NVML, selected with ``ACCELBACKENDS_NVML``.
- :class:`FakeStack`: fake vendor packages (``habana_frameworks``,
  ``oneccl_bindings_for_pytorch``, ``intel_extension_for_pytorch``, Ascend's ``torch_npu``, an
  XPU build of torch) with their package metadata, activated in child processes through
  ``PYTHONPATH``; they register their backend names over Gloo.
- :func:`launch_ranks` and ``python -m accelbackends.testing.rank``: real multi-process runs.

Nothing here imports torch until a multi-process run starts.
"""

from __future__ import annotations

from .nvml import FakeGpu
from .ranks import RankResult, launch_ranks
from .stack import FakeStack
from .tree import FakeTree

__all__ = ["FakeGpu", "FakeStack", "FakeTree", "RankResult", "launch_ranks"]
