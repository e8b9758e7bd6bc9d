"""Testing kit for accelerator plugins: drive the real plugin code without the hardware.

- `tree`: `FakeTree`, a fake machine (sysfs, procfs, ``/dev``) for probes and registries.
- `nvml`: a fake NVML (`FakeGpu`), selected with ``ACCELBACKENDS_NVML``.
- `stack`: `FakeStack`, fake vendor packages (``habana_frameworks``,
  ``oneccl_bindings_for_pytorch``, ``intel_extension_for_pytorch``, Ascend's ``torch_npu``, an
  XPU build of torch) with their package metadata, activated in child processes through
  ``PYTHONPATH``; they register their backend names over Gloo.
- `fakes`: the sources of those fake packages, which `FakeStack` copies (test code only).
- `launch`: `launch_ranks`, real multi-process runs the way ``torchrun`` starts them.
- `rank_program`: ``python -m accelbackends.testing.rank_program``, the program those ranks run.
- `plugins`: `InlinePlugin`, `fake_accelerator`, `install_distribution`: plugins built in a
  test, and installed for real (``*.dist-info`` with entry points).
- `cluster`: `launcher_env` and `clean_environment`: the variables a launcher sets for one
  rank, and an environment without any.
- `pytest_plugin`: all of the above as pytest fixtures, loaded by pytest through the
  ``pytest11`` entry point (not imported here: no pytest needed).

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
