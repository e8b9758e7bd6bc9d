"""Testing kit for accelerator plugins: drive the real plugin code without the hardware.

- `FakeTree`: a fake machine (sysfs, procfs, ``/dev``) for probes and registries.
- `accelbackends.testing.nvml`: a fake NVML, selected with ``ACCELBACKENDS_NVML``.
- `FakeStack`: fake vendor packages (``habana_frameworks``,
  ``oneccl_bindings_for_pytorch``, ``intel_extension_for_pytorch``, Ascend's ``torch_npu``, an
  XPU build of torch) with their package metadata, activated in child processes through
  ``PYTHONPATH``; they register their backend names over Gloo.
- `launch_ranks` and ``python -m accelbackends.testing.rank_program``: real multi-process
  runs.
- `InlinePlugin`, `fake_accelerator`, `install_distribution`: plugins built
  in a test, and installed for real (``*.dist-info`` with entry points).
- `launcher_env` and `clean_environment`: the variables a launcher sets for one
  rank, and an environment without any.
- `accelbackends.testing.pytest_plugin`: all of the above as pytest fixtures, loaded by
  pytest through the ``pytest11`` entry point (not imported here: no pytest needed).

Nothing here imports torch until a multi-process run starts.
"""

from __future__ import annotations

from .cluster import LAUNCHERS, clean_environment, launcher_env
from .launch import RankResult, launch_ranks
from .nvml import FakeGpu
from .plugins import InlinePlugin, fake_accelerator, install_distribution
from .stack import FakeStack
from .tree import FakeTree

__all__ = [
    "LAUNCHERS",
    "FakeGpu",
    "FakeStack",
    "FakeTree",
    "InlinePlugin",
    "RankResult",
    "clean_environment",
    "fake_accelerator",
    "install_distribution",
    "launch_ranks",
    "launcher_env",
]
