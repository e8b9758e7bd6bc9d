"""Whether the installed torch has ``torch.distributed`` and which backends it was built with,
read from its build files without importing it (``info`` must not import torch).

Every torch wheel from 2.4 to 2.15 ships CMake's export of its targets,
``torch/share/cmake/Caffe2/Caffe2Targets.cmake``; the compile definitions each target hands
on say what was built: ``USE_DISTRIBUTED`` (``torch.distributed``), and ``USE_C10D_GLOO``,
``USE_C10D_NCCL``, ``USE_C10D_MPI``, ``USE_C10D_UCC``, ``USE_C10D_XCCL`` for its process-group
backends (torch's own CMake sets one per backend it compiles). `ask_torch` asks the imported
torch instead, for ``info --import-torch``.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BACKENDS", "TorchFeatures", "ask_torch", "read_build_files"]

#: The process-group backends torch can be built with, in the order ``info`` lists them.
BACKENDS = ("gloo", "nccl", "mpi", "ucc", "xccl")
_TARGETS = "share/cmake/Caffe2/Caffe2Targets.cmake"
_DEFINITIONS = re.compile(r'INTERFACE_COMPILE_DEFINITIONS\s+"([^"]*)"')


@dataclass(frozen=True)
class TorchFeatures:
    """What the installed torch offers for distributed work.

    Attributes:
        distributed: Whether ``torch.distributed`` is built in; None where it cannot be told.
        backends: The process-group backends compiled in, from `BACKENDS`.
        source: Where the answer comes from, in words.
    """

    distributed: bool | None
    backends: tuple[str, ...]
    source: str


def _torch_directory() -> Path | None:
    """The installed torch package's directory, found without importing it."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def read_build_files(directory: Path | None = None) -> TorchFeatures | None:
    """The features recorded in torch's build files, or None where torch is not installed.

    ``directory``: the torch package's directory (default: the one ``import torch`` would load).
    """
    directory = directory or _torch_directory()
    if directory is None:
        return None
    targets = directory / _TARGETS
    try:
        text = targets.read_text(errors="replace")
    except OSError:
        return TorchFeatures(
            None,
            (),
            f"unknown: torch's build file {_TARGETS} is missing (info --import-torch asks torch)",
        )
    defined = {word for group in _DEFINITIONS.findall(text) for word in group.split(";")}
    distributed = "USE_DISTRIBUTED" in defined
    backends = tuple(b for b in BACKENDS if f"USE_C10D_{b.upper()}" in defined)
    return TorchFeatures(distributed, backends if distributed else (), f"torch's {_TARGETS}")


def ask_torch() -> TorchFeatures | None:
    """The features as the imported torch reports them (imports torch), or None without torch."""
    from .torchload import import_torch_distributed

    if _torch_directory() is None:
        return None
    dist = import_torch_distributed()
    if not dist.is_available():
        return TorchFeatures(False, (), "torch.distributed.is_available()")
    backends = tuple(
        b
        for b in BACKENDS
        if getattr(dist, f"is_{b}_available", lambda: False)()  # is_xccl_available: 2.8+
    )
    return TorchFeatures(True, backends, "torch.distributed.is_<backend>_available()")
