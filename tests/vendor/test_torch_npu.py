"""Ascend's real torch-npu wheel without the CANN toolkit, with the accelbackends-ascend plugin.

torch (>= 2.5) imports torch_npu at ``import torch`` through its ``torch.backends`` entry point,
and torch_npu cannot load without CANN: ``import torch`` itself fails. ``info`` (no torch) must
say why in the ``npu`` row; ``init()`` must fail with one error naming the way out, and with
torch's auto-loading turned off must run on the CPU with ``hccl`` registered by nobody."""

from __future__ import annotations

import json

from .conftest import check, info, init, installed_version, needs, reasons

pytestmark = [needs("torch-npu"), needs("accelbackends-ascend")]
AUTOLOAD_OFF = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}


def test_info_says_cann_is_missing_and_what_that_does_to_import_torch() -> None:
    code, report = info()
    assert code == 0, report["errors"]
    status = {p["name"]: p["status"] for p in report["plugins"]}
    assert status["ascend"] == "active"
    npu = reasons(report)["npu"]
    assert f"torch_npu {installed_version('torch-npu')} is installed" in npu
    assert "Ascend's CANN toolkit is not installed" in npu
    assert "import torch fails while torch-npu is installed" in npu
    assert report["selected"]["accelerator"] == "cpu"


def test_init_explains_the_failed_autoload_instead_of_torchs_traceback() -> None:
    chosen = init()
    assert "error" in chosen, chosen
    assert chosen["error"].startswith("import torch failed: torch loads the device extension")
    assert "torch_npu" in chosen["error"]
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in chosen["error"]


def test_with_autoload_off_init_runs_on_the_cpu_and_nobody_registers_hccl() -> None:
    chosen = init(**AUTOLOAD_OFF)
    assert chosen.get("error") is None, chosen
    assert (chosen["accelerator"], chosen["backend"]) == ("cpu", "gloo")
    assert "HCCL" not in chosen["registered"]
    assert chosen["vendor_modules"] == []


def test_check_fails_with_the_autoload_message_and_passes_with_autoload_off() -> None:
    failed = check()
    assert failed.returncode == 1
    assert "import torch failed" in json.loads(failed.stdout)["error"]
    passed = check(**AUTOLOAD_OFF)
    assert passed.returncode == 0, passed.stderr
    assert json.loads(passed.stdout)["ok"] is True
