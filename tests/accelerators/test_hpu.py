"""The hpu plugin (Intel Gaudi) without a Gaudi: devices, reasons, module choice, hccl owner."""

from __future__ import annotations

from collections import namedtuple
from datetime import timedelta
from pathlib import Path

import pytest

from accelbackends.accelerators import hpu
from accelbackends.plugin.devices import habana_visible
from accelbackends.plugin.errors import ConfigError
from accelbackends.plugin.types import BindRequest, ClusterInfo, Detection, OptionsRequest
from accelbackends.testing import FakeStack, FakeTree

_Plugin = namedtuple("_Plugin", ["creator_fn", "extended_api"])


def site(tmp_path: Path, *, habana: bool = True, ascend: bool = False) -> tuple[str]:
    stack = FakeStack(tmp_path / f"site-{habana}-{ascend}")
    if habana:
        stack.installed("habana-torch-plugin", "1.21.0", "habana_frameworks")
    if ascend:
        stack.installed("torch_npu", "2.6.0", "torch_npu")
    return (str(stack.directory),)


def detect(tree: FakeTree, packages: tuple[str], env: dict[str, str] | None = None) -> Detection:
    return hpu.SPEC.detect(tree.probe(env or {}, packages))


def test_gaudi_devices_in_the_accel_class_with_device_nodes_are_counted(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root").gaudi(8).gaudi(1, vendor="0x8086")  # + an Intel NPU
    result = detect(tree, site(tmp_path))
    assert (result.available, result.device_count) == (True, 8)
    assert result.reason == (
        "8 Gaudi devices in /sys/class/accel (vendor 0x1da3); habana-torch-plugin 1.21.0"
    )


def test_gaudi_in_sysfs_without_device_nodes_points_at_the_container(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root").gaudi(2, dev=False)
    result = detect(tree, site(tmp_path))
    assert not result.available
    assert "2 in /sys/class/accel, but no /dev/accel/accel* node for them" in result.reason
    assert "not mounted into this container?" in result.reason


def test_legacy_device_nodes_are_counted(tmp_path: Path) -> None:
    result = detect(FakeTree(tmp_path / "root").gaudi_legacy(4), site(tmp_path))
    assert (result.available, result.device_count) == (True, 4)
    assert "as /dev/hl* device nodes" in result.reason


def test_no_gaudi_with_habana_installed_never_makes_hpu_available(tmp_path: Path) -> None:
    result = detect(FakeTree(tmp_path / "root"), site(tmp_path))
    assert not result.available
    assert result.reason == (
        "no Gaudi device (no /sys/class/accel device with vendor 0x1da3 and no /dev/hl*); "
        "habana-torch-plugin 1.21.0 is installed, but there is no device for it"
    )


def test_gaudi_without_habana_frameworks_says_what_to_install(tmp_path: Path) -> None:
    result = detect(FakeTree(tmp_path / "root").gaudi(2), site(tmp_path, habana=False))
    assert not result.available
    assert result.reason.endswith(
        "but habana_frameworks is not installed — install habana-torch-plugin "
        "(Intel Gaudi software)"
    )


def test_ascend_installed_beside_habana_is_noted(tmp_path: Path) -> None:
    result = detect(FakeTree(tmp_path / "root").gaudi(1), site(tmp_path, ascend=True))
    assert result.available
    assert "torch_npu 2.6.0 (Ascend) is installed too" in result.reason
    assert "registers the same backend name 'hccl'" in result.reason


def test_habana_visible_modules_limit_the_count(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root").gaudi(8)
    result = detect(tree, site(tmp_path), {"HABANA_VISIBLE_MODULES": "4,5"})
    assert result.device_count == 2
    assert "HABANA_VISIBLE_MODULES='4,5' shows 2" in result.reason


def _cluster(local_rank: int, local_world_size: int) -> ClusterInfo:
    return ClusterInfo(
        launcher="test",
        rank=local_rank,
        world_size=local_world_size,
        local_rank=local_rank,
        local_world_size=local_world_size,
    )


def _module(local_rank: int, local_world_size: int, env: dict[str, str]) -> str:
    request = BindRequest(local_rank, local_world_size, _cluster(local_rank, local_world_size), env)
    return hpu.module_id_for(request, habana_visible(env))


def test_module_id_follows_the_local_rank_or_the_visible_modules() -> None:
    assert _module(3, 8, {}) == "3"
    assert _module(1, 2, {"HABANA_VISIBLE_MODULES": "6,7"}) == "7"


def test_module_id_set_by_the_user_is_kept_and_must_be_a_number() -> None:
    assert _module(1, 2, {"HLS_MODULE_ID": "5"}) == "5"
    with pytest.raises(ConfigError, match="HLS_MODULE_ID='first' is not valid"):
        _module(0, 1, {"HLS_MODULE_ID": "first"})


def test_more_local_ranks_than_visible_modules_cannot_share() -> None:
    env = {"HABANA_VISIBLE_MODULES": "2", "ACCELBACKENDS_SHARE_DEVICES": "1"}
    with pytest.raises(ConfigError) as caught:
        _module(1, 2, env)
    assert "2 local ranks but only 1 Gaudi module is visible" in str(caught.value)
    assert "cannot be shared between processes" in str(caught.value)


def _habana_creator() -> None: ...


def _ascend_creator() -> None: ...


def test_hccl_registered_by_habana_for_hpu_is_accepted() -> None:
    _habana_creator.__module__ = "habana_frameworks.torch.distributed.hccl"
    plugins = {"HCCL": _Plugin(_habana_creator, True)}
    assert hpu.hccl_owner(plugins, {"hccl": ["hpu"]}) is None


def test_hccl_registered_last_by_ascend_is_detected_and_named() -> None:
    _ascend_creator.__module__ = "torch_npu"
    plugins = {"HCCL": _Plugin(_ascend_creator, True)}
    problem = hpu.hccl_owner(plugins, {"hccl": ["npu"]})
    assert problem is not None
    assert "registered by Ascend's torch_npu (devices ['npu']), not by habana_frameworks" in (
        problem
    )
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in problem
    assert hpu.hccl_owner({}, {}) == "no backend named 'hccl' is registered"


def test_gloo_override_uses_plain_gloo() -> None:
    assert "gloo" in hpu.SPEC.backends
    assert hpu.SPEC.backend_options is not None
    request = OptionsRequest("gloo", "hpu", timedelta(seconds=5), _cluster(0, 1), {})
    assert hpu.SPEC.backend_options(request).process_group_backend == "gloo"


def test_deep_check_without_habana_frameworks_says_the_import_failed() -> None:
    assert hpu.SPEC.confirm is not None
    assert (hpu.SPEC.confirm() or "").startswith("import habana_frameworks.torch failed")
