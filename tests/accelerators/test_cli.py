"""The accelerator plugins as users meet them: ``accelbackends info``, overrides, and cheapness."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from accelbackends import Registry
from accelbackends.accelerators import BUILTIN, cuda, hpu, xpu
from accelbackends.plugin.config import read_probe_root
from accelbackends.plugin.types import Probe
from accelbackends.testing import FakeStack, FakeTree
from accelbackends.testing.cluster import clean_environment

# This machine's facts as the probes of this suite read them: the hermetic root (no
# accelerator) that tests/conftest.py sets, so these tests run on a GPU node too.
_HOST = Probe(env={"ACCELBACKENDS_NVML": "off"}, root=read_probe_root(os.environ))
_GPUS = cuda.find_hardware(_HOST)
HAS_GPU = bool(_GPUS.nvidia or _GPUS.amd)
HAS_INTEL_GPU = bool(xpu.find_gpus(_HOST))
HAS_GAUDI = bool(hpu.find_devices(_HOST).count)
NO_ACCELERATOR = not (HAS_GPU or HAS_INTEL_GPU or HAS_GAUDI)


def _env(**extra: str) -> dict[str, str]:
    env = clean_environment(os.environ)
    for launcher in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        env.pop(launcher, None)
    env.update(extra)
    return env


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accelbackends", *args],
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_built_in_accelerator_plugins_are_registered_by_module_path() -> None:
    assert dict(BUILTIN) == {
        "cpu": "accelbackends.accelerators.cpu",
        "cuda": "accelbackends.accelerators.cuda",
        "xpu": "accelbackends.accelerators.xpu",
        "hpu": "accelbackends.accelerators.hpu",
    }
    registry = Registry(env={"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "1"}, root="/nonexistent")
    names = [status.name for status in registry.detect()]
    assert names == ["cpu", "cuda", "hpu", "xpu"]


@pytest.mark.skipif(not NO_ACCELERATOR, reason="this machine has an accelerator")
def test_info_lists_every_accelerator_unavailable_with_its_reason() -> None:
    result = _cli("info", "--json")
    assert result.returncode == 0, result.stderr
    report = {a["name"]: a for a in json.loads(result.stdout)["accelerators"]}
    assert not any(report[name]["available"] for name in ("cuda", "xpu", "hpu"))
    assert report["cuda"]["reason"].startswith("no NVIDIA GPU (")
    assert "no AMD GPU (no /dev/kfd)" in report["cuda"]["reason"]
    assert report["xpu"]["reason"] == "no Intel GPU render node in /sys/class/drm"
    assert report["hpu"]["reason"].startswith("no Gaudi device (")
    assert json.loads(result.stdout)["selected"]["accelerator"] == "cpu"


@pytest.mark.skipif(HAS_GAUDI, reason="this machine has a Gaudi")
def test_requesting_hpu_without_one_exits_2_with_the_hpu_reason() -> None:
    result = _cli("info", env=_env(ACCELBACKENDS_ACCELERATOR="hpu"))
    assert result.returncode == 2
    # info still prints the report, the error on the line it concerns
    assert result.stdout.startswith("selected: none: error: ACCELBACKENDS_ACCELERATOR=hpu")
    assert result.stderr.startswith(
        "accelbackends: error: ACCELBACKENDS_ACCELERATOR=hpu: accelerator 'hpu' is not "
        "available: no Gaudi device ("
    )
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(not NO_ACCELERATOR, reason="this machine has an accelerator")
def test_installed_vendor_packages_without_devices_neither_win_nor_are_imported(
    tmp_path: Path,
) -> None:
    stack = FakeStack(tmp_path / "stack").habana().oneccl().ipex()
    script = (
        "import sys, json, accelbackends\n"
        "from accelbackends.cli.info import collect\n"
        "statuses = {s.name: s.detection.reason for s in accelbackends.detect()}\n"
        "selection = accelbackends.select()\n"
        "collect(accelbackends.default_registry())\n"
        "heavy = ('torch', 'habana_frameworks', 'oneccl_bindings_for_pytorch',\n"
        "         'intel_extension_for_pytorch', 'pynvml')\n"
        "print(json.dumps({'selected': selection.accelerator, 'reasons': statuses,\n"
        "                  'imported': [m for m in heavy if m in sys.modules]}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=stack.env(_env()),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["imported"] == []
    assert report["selected"] == "cpu"
    hpu_reason, xpu_reason = report["reasons"]["hpu"], report["reasons"]["xpu"]
    assert "habana-torch-plugin 1.21.0 is installed, but there is no device" in hpu_reason
    # The torch this suite runs on (2.13 in CI, another on a GPU node or in the version legs).
    release = ".".join(metadata.version("torch").split("+")[0].split(".")[:2])
    assert f"intel-extension-for-pytorch 2.6.0+cpu is built for torch 2.6, this is {release}" in (
        xpu_reason
    )


def test_info_over_a_fake_tree_reports_every_plugin_without_raising(tmp_path: Path) -> None:
    from accelbackends.cli.info import collect

    tree = FakeTree(tmp_path / "root").nvidia(2).intel_gpu().gaudi(4)
    report = collect(Registry(env={"ACCELBACKENDS_NVML": "off"}, root=tree.root))
    reasons = {a["name"]: a["reason"] for a in report["accelerators"]}
    # The host's torch decides the cuda and xpu verdicts; the hardware is reported either way.
    assert reasons["cuda"].startswith("2 NVIDIA GPUs in /proc/driver/nvidia/gpus")
    assert reasons["xpu"].startswith("1 Intel GPU (1 discrete; xe) in /sys/class/drm")
    assert reasons["hpu"].startswith("4 Gaudi devices in /sys/class/accel (vendor 0x1da3)")
