"""intel-extension-for-pytorch from the public index: a CPU wheel built for one torch release.

CI installs IPEX 2.8.0 with --no-deps beside torch 2.13: it cannot be imported there, must be
named as built for another torch, must never make ``xpu`` available, and breaks neither ``info``
nor ``init()`` (neither imports it)."""

from __future__ import annotations

import re

from .conftest import info, init, installed_version, needs, run

pytestmark = needs("intel-extension-for-pytorch")


def _release(version: str) -> str:
    match = re.match(r"(\d+)\.(\d+)", version)
    assert match, version
    return f"{match.group(1)}.{match.group(2)}"


def test_info_names_ipex_built_for_another_torch_and_xpu_stays_unavailable() -> None:
    ipex, torch = installed_version("intel-extension-for-pytorch"), installed_version("torch")
    assert ipex is not None and torch is not None
    code, report = info()
    assert code == 0, report["errors"]
    xpu = {a["name"]: a for a in report["accelerators"]}["xpu"]
    assert not xpu["available"]
    if _release(ipex) != _release(torch):
        assert (
            f"intel-extension-for-pytorch {ipex} is built for torch {_release(ipex)}, this is "
            f"{_release(torch)}" in xpu["reason"]
        )
    else:
        assert (
            f"intel-extension-for-pytorch {ipex} is installed, but it provides no device"
            in (xpu["reason"])
        )
    assert report["selected"]["accelerator"] == "cpu"


def test_the_mismatched_wheel_really_cannot_be_imported() -> None:
    ipex, torch = installed_version("intel-extension-for-pytorch"), installed_version("torch")
    assert ipex is not None and torch is not None
    if _release(ipex) == _release(torch):
        return  # a matched pair imports; the info test above covers it
    result = run(["-c", "import intel_extension_for_pytorch"])
    assert result.returncode != 0
    assert f"PyTorch {_release(ipex)}" in result.stdout + result.stderr


def test_init_chooses_the_cpu_without_importing_ipex() -> None:
    chosen = init()
    assert chosen.get("error") is None, chosen
    assert (chosen["accelerator"], chosen["backend"]) == ("cpu", "gloo")
    assert "intel_extension_for_pytorch" not in chosen["vendor_modules"]


def test_forcing_xpu_is_refused_with_the_ipex_reason() -> None:
    code, report = info(ACCELBACKENDS_ACCELERATOR="xpu")
    assert code == 2
    assert "accelerator 'xpu' is not available" in report["selected"]["error"]
    assert "intel-extension-for-pytorch" in report["selected"]["error"]
