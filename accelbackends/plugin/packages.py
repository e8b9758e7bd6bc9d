"""Installed-package facts, read from package metadata: nothing here imports torch or a vendor
stack.

Whether an accelerator the hardware offers can be used depends on what is installed: a CPU
build of torch cannot drive a GPU, and an Intel GPU needs a torch build with XPU support.
Importing torch or a vendor runtime to find out would cost seconds and might create a device
context before a ``fork``; the metadata answers in milliseconds.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import installed as _installed

if TYPE_CHECKING:
    from importlib import metadata

__all__ = ["NCCL_DISTRIBUTIONS", "Installed", "TorchBuild", "installed", "nccl", "torch_build"]

_RELEASE = re.compile(r"^(\d+)\.(\d+)")
_CUDA_TAG = re.compile(r"^cu(\d+)(\d)$")  # cu126 -> CUDA 12.6, cu118 -> 11.8
_ROCM_TAG = re.compile(r"^rocm(\d+(?:\.\d+)*)$")
#: The NCCL that torch's CUDA wheels load: NVIDIA's wheel for each CUDA major version
#: (torch 2.11.0+cu130 requires nvidia-nccl-cu13 2.28.9). A build that links NCCL statically
#: or takes it from the system (conda, a source build) installs none of them.
NCCL_DISTRIBUTIONS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")


@dataclass(frozen=True)
class Installed:
    """An installed distribution, as its metadata names it.

    Attributes:
        name: The distribution's name (`torch`, `habana-torch-plugin` ...).
        version: Its version.
    """

    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.name} {self.version}"


@dataclass(frozen=True)
class TorchBuild:
    """What the installed torch wheel was built for.

    Attributes:
        version: torch's version, with its local tag (`2.13.0+cpu`).
        cuda: The CUDA toolkit version torch was built with (as `torch.version.cuda` reports
            it), or None for a build without CUDA.
        hip: The ROCm (HIP) version, or None.
        xpu: The XPU (SYCL) version, or None.
        known: False when neither `torch/version.py` nor the version's local tag (`+cpu`,
            `+cu126`, `+rocm6.2`, `+xpu`) says which build this is; the deep check at init
            then decides.
    """

    version: str
    cuda: str | None = None
    hip: str | None = None
    xpu: str | None = None
    known: bool = True

    @property
    def release(self) -> tuple[int, int]:
        """``(major, minor)``, e.g. ``(2, 13)``; ``(0, 0)`` where the version is unreadable."""
        match = _RELEASE.match(self.version)
        return (int(match.group(1)), int(match.group(2))) if match else (0, 0)

    def __str__(self) -> str:
        return f"torch {self.version}"


def _distribution(name: str, paths: Sequence[str] | None) -> _installed.Distribution | None:
    if paths is None:  # sys.path: answered from the cache while nothing there changed
        return _installed.distribution(name)
    from importlib import metadata

    dist: metadata.Distribution
    for dist in metadata.distributions(name=name, path=list(paths)):
        return _installed.Distribution(
            str(dist.metadata["Name"] or name), str(dist.version), str(dist.locate_file(""))
        )
    return None


def installed(*names: str, paths: Sequence[str] | None = None) -> Installed | None:
    """The first of the distributions ``names`` (any spelling: ``-``, ``_``, ``.``) that is
    installed in ``paths`` (``sys.path`` when None), or None."""
    for name in names:
        dist = _distribution(name, paths)
        if dist is not None:
            return Installed(dist.name, dist.version)
    return None


#: Parsed ``torch/version.py`` files by (path, modification time, size): several probes ask at
#: each detection, and every rank's first ``init()`` detects.
_parsed: dict[tuple[str, int, int], dict[str, str | None] | None] = {}


def _version_file_values(path: Path) -> dict[str, str | None] | None:
    """The ``cuda``, ``hip`` and ``xpu`` assignments of a generated ``torch/version.py``."""
    try:
        status = path.stat()
    except OSError:
        return None
    key = (str(path), status.st_mtime_ns, status.st_size)
    if key not in _parsed:
        _parsed[key] = _parse_version_file(path)
    found = _parsed[key]
    return None if found is None else dict(found)


def _parse_version_file(path: Path) -> dict[str, str | None] | None:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    values: dict[str, str | None] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if (
            isinstance(target, ast.Name)
            and target.id in ("cuda", "hip", "xpu")
            and isinstance(value, ast.Constant)
            and (value.value is None or isinstance(value.value, str))
        ):
            values[target.id] = value.value
    return values


def _from_local_tag(version: str) -> dict[str, str | None] | None:
    """What the local version tag says (``2.13.0+cu126`` -> CUDA 12.6); None when it is silent."""
    _, _, tag = version.partition("+")
    if tag == "cpu":
        return {}
    if tag == "xpu":
        return {"xpu": "xpu"}
    if match := _CUDA_TAG.match(tag):
        return {"cuda": f"{match.group(1)}.{match.group(2)}"}
    if match := _ROCM_TAG.match(tag):
        return {"hip": match.group(1)}
    return None


def torch_build(paths: Sequence[str] | None = None) -> TorchBuild | None:
    """The installed torch build, or None when torch is not installed.

    ``torch/version.py`` (generated at build time, read as text) is the authority; the local
    version tag fills in what an older ``version.py`` does not say (it has no ``xpu`` before
    torch 2.5).
    """
    dist = _distribution("torch", paths)
    if dist is None:
        return None
    version = dist.version
    from_file = _version_file_values(Path(dist.location, "torch", "version.py"))
    from_tag = _from_local_tag(version)
    if from_file is None and from_tag is None:
        return TorchBuild(version, known=False)
    facts = {**(from_tag or {}), **{k: v for k, v in (from_file or {}).items() if v is not None}}
    return TorchBuild(version, facts.get("cuda"), facts.get("hip"), facts.get("xpu"))


def nccl(paths: Sequence[str] | None = None, cuda: str | None = None) -> Installed | None:
    """The installed NCCL wheel (`NCCL_DISTRIBUTIONS`), or None where none is installed; the
    one for CUDA ``cuda``'s major version first (``"13.0"`` -> ``nvidia-nccl-cu13``), as a
    torch built for that CUDA loads it."""
    names = list(NCCL_DISTRIBUTIONS)
    if cuda is not None:
        wanted = f"nvidia-nccl-cu{cuda.partition('.')[0]}"
        names.sort(key=lambda name: name != wanted)
    return installed(*names, paths=paths)
