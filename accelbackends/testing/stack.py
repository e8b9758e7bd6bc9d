"""Fake vendor stacks for child processes: importable fake packages with installed-package
metadata, in a directory that goes on ``PYTHONPATH``.

A fake stack is activated through the environment only, never by patching accelbackends:

```python
stack = FakeStack(tmp_path / "stack").habana(devices=2)
program = "accelbackends.testing.rank_program"
subprocess.run([sys.executable, "-m", program, "--root", tree.root],
               env=stack.env(), check=True)
```

The fake packages register the same backend names as the real ones (``hccl``, ``ccl``, ``xccl``)
over Gloo, so ``init_process_group`` and collectives really run between the ranks.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from . import nvml
from .fakes import runtime

__all__ = ["FakeStack"]

_FAKES = Path(__file__).parent / "fakes"


class FakeStack:
    """A directory of fake packages; every method returns the stack, so calls chain."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.variables: dict[str, str] = {}

    def _copy(self, package: str) -> None:
        target = self.directory / package
        if not target.exists():
            shutil.copytree(_FAKES / package, target, ignore=shutil.ignore_patterns("__pycache__"))

    def installed(
        self, distribution: str, version: str, *top_level: str, entry_points: str = ""
    ) -> FakeStack:
        """Installed-package metadata for ``distribution`` (``.dist-info``), nothing else but
        ``entry_points`` (an ``entry_points.txt``) where given."""
        stem = f"{distribution.replace('-', '_')}-{version}"
        info = self.directory / f"{stem}.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n",
            encoding="utf-8",
        )
        (info / "top_level.txt").write_text("".join(f"{t}\n" for t in top_level), "utf-8")
        if entry_points:
            (info / "entry_points.txt").write_text(entry_points, encoding="utf-8")
        return self

    def habana(self, *, devices: int = 2, version: str = "1.21.0") -> FakeStack:
        """``habana_frameworks`` (distribution ``habana-torch-plugin``) reporting ``devices``
        Gaudi modules, with ``hccl`` over Gloo."""
        self._copy("habana_frameworks")
        self.variables[runtime.HPU_DEVICES] = str(devices)
        return self.installed("habana-torch-plugin", version, "habana_frameworks")

    def oneccl(self, *, version: str = "2.6.0+xpu") -> FakeStack:
        """``oneccl_bindings_for_pytorch`` (distribution ``oneccl_bind_pt``), ``ccl`` over Gloo."""
        self._copy("oneccl_bindings_for_pytorch")
        return self.installed("oneccl_bind_pt", version, "oneccl_bindings_for_pytorch")

    def ipex(self, *, version: str = "2.6.0+cpu") -> FakeStack:
        """``intel_extension_for_pytorch``, which provides no device."""
        self._copy("intel_extension_for_pytorch")
        return self.installed("intel_extension_for_pytorch", version, "intel_extension_for_pytorch")

    def torch_npu(self, *, version: str = "2.6.0", devices: int = 2) -> FakeStack:
        """Ascend's ``torch_npu``, finding ``devices`` NPUs: like the real package on import, it
        names torch's PrivateUse1 device ``npu``, registers ``torch.npu``, and registers its own
        backend named ``hccl`` (over Gloo)."""
        self._copy("torch_npu")
        self.variables[runtime.NPU_DEVICES] = str(devices)
        return self.installed("torch_npu", version, "torch_npu")

    def xpu_torch(
        self, *, version: str = "2.13.0+xpu", devices: int = 2, xccl: bool = True
    ) -> FakeStack:
        """Make the installed torch look like an XPU build: its metadata says ``version``,
        ``torch.xpu`` reports ``devices`` devices, and ``xccl`` is built in if ``xccl``.

        The metadata shadows the real torch's (it comes first on ``sys.path``); the real torch
        is still the one imported, patched at import by the stack's ``sitecustomize`` (which
        shadows any other ``sitecustomize`` in the child process).
        """
        shutil.copy2(_FAKES / "sitecustomize.py", self.directory / "sitecustomize.py")
        self.variables[runtime.XPU_DEVICES] = str(devices)
        self.variables[runtime.XCCL] = "1" if xccl else "0"
        # From torch 2.14 the built-in backends (gloo, nccl, xccl) are registered through the
        # torch distribution's own `torch.distributed.backends` entry points: metadata without
        # them hides gloo ("Unknown c10d backend type GLOO"), so the fake keeps the real ones.
        return self.installed("torch", version, "torch", entry_points=_torch_entry_points())

    def nvml(
        self, gpus: list[nvml.FakeGpu], *, driver: str = "550.54.15", failure: str | None = None
    ) -> FakeStack:
        """Use the fake NVML (`accelbackends.testing.nvml`) listing ``gpus``."""
        self.variables.update(nvml.environment(gpus, driver=driver, failure=failure))
        return self

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (``os.environ`` by default) with the stack first on ``PYTHONPATH`` and its
        configuration variables."""
        env = dict(os.environ if base is None else base)
        path = [str(self.directory), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(path)
        env.update(self.variables)
        return env


def _torch_entry_points() -> str:
    """The installed torch distribution's ``entry_points.txt`` ("" where it has none)."""
    from importlib import metadata

    try:
        return metadata.distribution("torch").read_text("entry_points.txt") or ""
    except metadata.PackageNotFoundError:
        return ""
