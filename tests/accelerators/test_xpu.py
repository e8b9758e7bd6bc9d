"""The xpu plugin (Intel GPUs) without a GPU: render nodes, reasons, backend choice, options."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from accelbackends.accelerators import xpu
from accelbackends.plugin.errors import ConfigError, InitError
from accelbackends.plugin.packages import TorchBuild
from accelbackends.plugin.types import BindRequest, ClusterInfo, Detection, OptionsRequest
from accelbackends.testing import FakeStack, FakeTree


def site(
    tmp_path: Path,
    torch: str | None,
    *,
    oneccl: bool = False,
    ipex: bool = False,
    ipex_version: str = "2.6.0+cpu",
) -> tuple[str]:
    stack = FakeStack(tmp_path / f"site-{torch}-{oneccl}-{ipex}-{ipex_version}")
    if torch is not None:
        stack.installed("torch", torch, "torch")
    if oneccl:
        stack.installed("oneccl_bind_pt", "2.6.0+xpu", "oneccl_bindings_for_pytorch")
    if ipex:
        stack.installed("intel_extension_for_pytorch", ipex_version, "intel_extension_for_pytorch")
    return (str(stack.directory),)


def detect(tree: FakeTree, packages: tuple[str], env: dict[str, str] | None = None) -> Detection:
    return xpu.make_spec(packages).detect(tree.probe(env or {}, packages))


def test_render_nodes_tell_discrete_from_integrated_and_skip_other_vendors(
    tmp_path: Path,
) -> None:
    tree = (
        FakeTree(tmp_path)
        .intel_gpu(integrated=True, driver="i915")
        .intel_gpu(vendor="0x10de", driver="nvidia")
        .intel_gpu(driver="xe")
        .intel_gpu(driver="simpledrm")
    )
    gpus = xpu.find_gpus(tree.probe())
    assert [(g.node, g.driver, g.integrated) for g in gpus] == [
        ("renderD128", "i915", True),
        ("renderD130", "xe", False),
    ]


def test_no_render_node_is_the_reason(tmp_path: Path) -> None:
    result = detect(FakeTree(tmp_path / "root"), site(tmp_path, "2.13.0+xpu"))
    assert result == Detection(False, 0, "no Intel GPU render node in /sys/class/drm")


@pytest.mark.parametrize(
    ("torch", "ipex", "said"),
    [
        ("2.13.0+xpu", "2.13.10+xpu", "intel-extension-for-pytorch 2.13.10+xpu is installed, but "
         "it provides no device"),
        ("2.13.0+cpu", "2.8.0", "intel-extension-for-pytorch 2.8.0 is built for torch 2.8, this "
         "is 2.13; it provides no device either"),
    ],
    ids=["matched", "built-for-another-torch"],
)  # fmt: skip
def test_installed_ipex_without_a_device_never_makes_xpu_available_and_says_why(
    tmp_path: Path, torch: str, ipex: str, said: str
) -> None:
    result = detect(
        FakeTree(tmp_path / "root"), site(tmp_path, torch, ipex=True, ipex_version=ipex)
    )
    assert not result.available
    assert said in result.reason


def test_intel_gpu_with_a_cpu_torch_says_to_install_an_xpu_build(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root").intel_gpu()
    result = detect(tree, site(tmp_path, "2.13.0+cpu", ipex=True))
    assert not result.available
    assert result.reason.startswith("1 Intel GPU (1 discrete; xe) in /sys/class/drm")
    assert "torch 2.13.0+cpu has no XPU support" in result.reason
    assert "alone does not provide one" in result.reason
    assert result.reason.endswith("install an XPU build of torch")


def test_xpu_torch_from_2_8_is_available_with_xccl(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root").intel_gpu().intel_gpu()
    packages = site(tmp_path, "2.8.0+xpu")
    result = detect(tree, packages)
    assert (result.available, result.device_count) == (True, 2)
    assert result.reason.endswith("torch 2.8.0+xpu with xccl")
    assert xpu.make_spec(packages).default_backend == "xccl"


def test_older_xpu_torch_uses_ccl_from_the_oneccl_bindings(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root").intel_gpu()
    packages = site(tmp_path, "2.6.0+xpu", oneccl=True)
    result = detect(tree, packages)
    assert result.available
    assert "with ccl from oneccl_bind_pt 2.6.0+xpu (end of life: Intel discontinued" in (
        result.reason
    )
    assert xpu.make_spec(packages).default_backend == "ccl"


def test_older_xpu_torch_without_oneccl_is_unavailable_with_both_remedies(
    tmp_path: Path,
) -> None:
    tree = FakeTree(tmp_path / "root").intel_gpu()
    result = detect(tree, site(tmp_path, "2.7.1+xpu"))
    assert not result.available
    assert "torch 2.7.1+xpu has no xccl backend (its XPU wheels ship it from 2.8)" in result.reason
    assert "upgrade torch to 2.8 or later (or install oneccl_bind_pt, end of life" in (
        result.reason
    )


@pytest.mark.parametrize(
    ("version", "oneccl", "backend"),
    [
        ("2.13.0+xpu", False, "xccl"),
        ("2.8.0+xpu", True, "xccl"),
        ("2.7.1+xpu", True, "ccl"),
        ("2.5.1+xpu", False, None),
    ],
)
def test_backend_follows_the_torch_and_oneccl_versions(
    version: str, oneccl: bool, backend: str | None
) -> None:
    assert xpu.backend_plan(TorchBuild(version, xpu="xpu"), oneccl) == backend


def test_ze_affinity_mask_limits_the_count_and_a_bad_one_is_refused_at_init(
    tmp_path: Path,
) -> None:
    tree = FakeTree(tmp_path / "root").intel_gpu().intel_gpu()
    packages = site(tmp_path, "2.13.0+xpu")
    shown = detect(tree, packages, {"ZE_AFFINITY_MASK": "1"})
    assert (shown.available, shown.device_count) == (True, 1)
    assert "ZE_AFFINITY_MASK='1' shows 1" in shown.reason
    bad = detect(tree, packages, {"ZE_AFFINITY_MASK": "one"})
    assert bad.available
    assert "ZE_AFFINITY_MASK='one' is not valid" in bad.reason


def _cluster() -> ClusterInfo:
    return ClusterInfo(launcher="test", rank=1, world_size=4, local_rank=1, local_world_size=2)


def _request(backend: str, env: dict[str, str] | None = None) -> OptionsRequest:
    return OptionsRequest(backend, "xpu:1", timedelta(seconds=60), _cluster(), env or {})


def test_ccl_variables_come_from_the_cluster_and_keep_the_users() -> None:
    assert xpu.ccl_environment(_request("ccl")) == {
        "CCL_PROCESS_LAUNCHER": "none",
        "CCL_LOCAL_RANK": "1",
        "CCL_LOCAL_SIZE": "2",
    }
    mine = xpu.ccl_environment(_request("ccl", {"CCL_PROCESS_LAUNCHER": "pmix"}))
    assert "CCL_PROCESS_LAUNCHER" not in mine


def test_xccl_on_a_torch_without_it_says_to_use_ccl() -> None:
    assert xpu.make_spec().backend_options is not None
    with pytest.raises(
        InitError, match=r"built without the xccl backend.*ACCELBACKENDS_BACKEND=ccl"
    ):
        xpu.make_spec().backend_options(_request("xccl"))  # type: ignore[misc]


def test_ccl_without_the_bindings_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("CCL_PROCESS_LAUNCHER", "CCL_LOCAL_RANK", "CCL_LOCAL_SIZE"):
        # Record the variable's absence, so the variables the plugin sets are removed again.
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    spec = xpu.make_spec()
    assert spec.backend_options is not None
    with pytest.raises(
        InitError, match=r"needs oneccl_bindings_for_pytorch.*install oneccl_bind_pt"
    ):
        spec.backend_options(_request("ccl"))
    assert os.environ["CCL_LOCAL_RANK"] == "1"  # set before the import, as oneCCL needs


def test_gloo_override_uses_plain_gloo() -> None:
    spec = xpu.make_spec()
    assert "gloo" in spec.backends
    assert spec.backend_options is not None
    assert spec.backend_options(_request("gloo")).process_group_backend == "gloo"


def test_deep_check_and_binding_on_a_cpu_torch_explain_themselves() -> None:
    spec = xpu.make_spec()
    assert spec.confirm is not None
    assert (spec.confirm() or "").startswith("torch.xpu.is_available() is False")
    with pytest.raises(ConfigError, match="no Intel GPUs are visible to this process"):
        spec.bind(BindRequest(0, 1, _cluster(), {}))
