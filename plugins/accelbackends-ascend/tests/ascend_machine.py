"""A fake Ascend node for the tests: device nodes and driver files in a FakeTree."""

from __future__ import annotations

import os
from pathlib import Path

import accelbackends_ascend

from accelbackends.testing import FakeStack, FakeTree

#: Where ``accelbackends_ascend`` is imported from: children get it on PYTHONPATH, so the tests
#: also run from a checkout before ``pip install``.
SOURCE = str(Path(accelbackends_ascend.__file__).resolve().parents[1])

CONTROL = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")


def ascend_node(
    tree: FakeTree,
    npus: int = 2,
    *,
    control: tuple[str, ...] = CONTROL,
    driver: str | None = "24.1.rc1",
    install_path: str | None = None,
    cann: str | None = "/usr/local/Ascend/ascend-toolkit/latest",
) -> FakeTree:
    """``npus`` NPU nodes, the ``control`` nodes, the driver's ``version.info`` (under
    ``install_path`` recorded in ``/etc/ascend_install.info`` where given), and the CANN
    toolkit's ``lib64/libhccl.so`` under ``cann`` (None: no CANN)."""
    if cann is not None:
        tree.write(f"{cann}/lib64/libhccl.so")
    for index in range(npus):
        tree.write(f"/dev/davinci{index}")
    for node in control:
        tree.write(node)
    if driver is not None:
        base = install_path or "/usr/local/Ascend"
        tree.write(f"{base}/driver/version.info", f"Version={driver}\nascendhal_version=7.35.19\n")
        if install_path:
            tree.write("/etc/ascend_install.info", f"Driver_Install_Path_Param={install_path}\n")
    return tree


def site(stack: FakeStack, *, torch_npu: bool = True, habana: bool = False) -> tuple[str]:
    """Installed-package metadata only, for ``probe.packages``."""
    if torch_npu:
        stack.installed("torch-npu", "2.6.0.post3", "torch_npu")
    if habana:
        stack.installed("habana-torch-plugin", "1.21.0", "habana_frameworks")
    return (str(stack.directory),)


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment with the plugin's source first on PYTHONPATH."""
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SOURCE, env.get("PYTHONPATH", "")]))
    return env
