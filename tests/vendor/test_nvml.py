"""NVIDIA's real NVML binding (nvidia-ml-py) on a node without the NVIDIA driver.

Under ``auto`` the probe does not load it where no driver shows itself; told to use it, it
loads it and reports NVML's own failure. Either way the CPU is chosen and ``check`` passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import check, info, init, needs, reasons, run

pytestmark = [
    needs("nvidia-ml-py"),
    pytest.mark.skipif(
        Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia").exists(),
        reason="this node has the NVIDIA driver; these tests are for a node without it",
    ),
]


def test_auto_reports_no_driver_and_chooses_the_cpu() -> None:
    code, report = info()
    assert code == 0, report["errors"]
    assert "no NVIDIA driver" in reasons(report)["cuda"]
    assert report["selected"]["accelerator"] == "cpu"


def test_pynvml_named_explicitly_reports_nvmls_own_failure() -> None:
    code, report = info(ACCELBACKENDS_NVML="pynvml")
    assert code == 0, report["errors"]
    assert "NVML (pynvml) failed: NVML Shared Library Not Found" in reasons(report)["cuda"]
    assert report["selected"]["accelerator"] == "cpu"


def test_info_never_loads_pynvml_where_no_driver_shows_itself() -> None:
    program = (
        "import sys, accelbackends; accelbackends.detect(); "
        "print('pynvml' in sys.modules, 'torch' in sys.modules)"
    )
    result = run(["-c", program])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]


def test_init_and_check_run_on_the_cpu() -> None:
    # (torch 2.13's torch.cuda imports pynvml itself where it is installed: not ours to avoid.)
    chosen = init()
    assert (chosen["accelerator"], chosen["backend"]) == ("cpu", "gloo")
    result = check()
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ok"] is True
