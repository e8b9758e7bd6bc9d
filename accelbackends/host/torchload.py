"""Importing torch where a device extension that torch loads by itself cannot load.

From torch 2.5 on, ``import torch`` imports every package that declares a ``torch.backends``
entry point (``torch_npu`` does: ``torch_npu = torch_npu:_autoload``). When that package cannot
load, torch raises ``RuntimeError: Failed to load the backend extension: torch_npu`` from
``import torch`` itself: with ``torch-npu`` 2.13.0 installed and Ascend's CANN toolkit absent,
every program that imports torch fails, on a node that has no NPU and would run on the CPU.
This module turns that into one error that names the extension, its cause and the ways out.
"""

from __future__ import annotations

import re
from typing import Any

from ..plugin.errors import InitError

__all__ = ["AUTOLOAD", "import_torch_distributed"]

#: torch's own switch for the extension auto-loading (torch >= 2.5).
AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"
_FAILED = re.compile(r"Failed to load the backend extension: (\S+?)\.?(\s|$)")


def import_torch_distributed() -> Any:
    """``torch.distributed``, or an `InitError` saying which auto-loaded device extension broke
    ``import torch`` and what to do about it."""
    try:
        import torch.distributed as dist
    except RuntimeError as exc:
        match = _FAILED.search(str(exc))
        if match is None:
            raise
        raise InitError(explain_autoload_failure(match.group(1), exc.__cause__)) from exc
    return dist


def explain_autoload_failure(extension: str, cause: BaseException | None) -> str:
    """The message for ``import torch`` failing in ``extension``'s auto-load hook."""
    why = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
    hint = ""
    if extension == "torch_npu":
        hint = (
            "install Ascend's CANN toolkit and source its set_env.sh (torch_npu needs its "
            "libraries, e.g. libhccl.so, at import), "
        )
    return (
        f"import torch failed: torch loads the device extension {extension} at import (its "
        f"torch.backends entry point), and {extension} cannot be loaded{why}; {hint}uninstall "
        f"the package that provides {extension}, or set {AUTOLOAD}=0 to start torch without "
        "it"
    )
