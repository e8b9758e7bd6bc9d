"""The fast probe: what it finds on a fake Ascend node, and the reasons it gives."""

from __future__ import annotations

import subprocess
import sys

import accelbackends_ascend
import pytest
from accelbackends_ascend import probe
from ascend_machine import ascend_node, child_env, site

import accelbackends
from accelbackends.testing import FakeStack, FakeTree
from accelbackends.testing.pytest_plugin import RegistryFactory


def detect(
    tree: FakeTree, packages: tuple[str], env: dict[str, str] | None = None
) -> accelbackends.Detection:
    return accelbackends_ascend.SPEC.detect(tree.probe(env or {}, packages))


def test_npus_with_control_nodes_and_torch_npu_are_available(
    accelbackends_tree: FakeTree, accelbackends_stack: FakeStack
) -> None:
    result = detect(ascend_node(accelbackends_tree, 8), site(accelbackends_stack))
    assert (result.available, result.device_count) == (True, 8)
    assert result.reason == (
        "8 Ascend NPUs as /dev/davinci* device nodes (driver 24.1.rc1); torch-npu 2.6.0.post3"
    )


def test_no_device_nodes_with_a_driver_points_at_the_container(
    accelbackends_tree: FakeTree, accelbackends_stack: FakeStack
) -> None:
    tree = ascend_node(accelbackends_tree, 0, control=())
    result = detect(tree, site(accelbackends_stack))
    assert not result.available
    assert result.reason == (
        "no Ascend NPU (no /dev/davinci<N> device nodes); the Ascend driver 24.1.rc1 is "
        "installed, but no NPU node is visible here (not passed into this container?); "
        "torch-npu 2.6.0.post3 is installed, but there is no NPU for it"
    )


def test_npus_with_torch_npu_but_no_cann_say_that_import_torch_fails(
    accelbackends_tree: FakeTree, accelbackends_stack: FakeStack
) -> None:
    result = detect(ascend_node(accelbackends_tree, 2, cann=None), site(accelbackends_stack))
    assert not result.available
    assert result.reason.startswith(
        "2 Ascend NPUs as /dev/davinci* device nodes (driver 24.1.rc1); torch-npu 2.6.0.post3, "
        "but Ascend's CANN toolkit is not installed (no lib64/libhccl.so under "
        "$ASCEND_HOME_PATH or $ASCEND_TOOLKIT_HOME or /usr/local/Ascend/ascend-toolkit/latest "
        "or /usr/local/Ascend/cann): import torch fails while torch-npu is installed"
    )
    assert result.reason.endswith("install CANN and source its set_env.sh, or uninstall torch-npu")


def test_cann_is_found_where_set_env_sh_says(
    accelbackends_tree: FakeTree, accelbackends_stack: FakeStack
) -> None:
    tree = ascend_node(accelbackends_tree, 1, cann="/opt/cann/8.1")
    result = detect(tree, site(accelbackends_stack), {"ASCEND_HOME_PATH": "/opt/cann/8.1"})
    assert result.available, result.reason


def test_torch_npu_without_an_npu_or_cann_says_both(
    accelbackends_tree: FakeTree, accelbackends_stack: FakeStack
) -> None:
    result = detect(accelbackends_tree, site(accelbackends_stack))
    assert result.reason.startswith(
        "no Ascend NPU (no /dev/davinci<N> device nodes); torch-npu 2.6.0.post3 is installed, "
        "but there is no NPU for it, and Ascend's CANN toolkit is not installed"
    )


def test_an_empty_machine_says_there_are_no_device_nodes(
    accelbackends_tree: FakeTree, accelbackends_stack: FakeStack
) -> None:
    result = detect(accelbackends_tree, site(accelbackends_stack, torch_npu=False))
    assert (result.available, result.reason) == (
        False,
        "no Ascend NPU (no /dev/davinci<N> device nodes)",
    )


def test_missing_control_nodes_are_named(
    accelbackends_tree: FakeTree, accelbackends_stack: FakeStack
) -> None:
    tree = ascend_node(accelbackends_tree, 2, control=("/dev/davinci_manager",))
    result = detect(tree, site(accelbackends_stack))
    assert not result.available
    assert "but /dev/devmm_svm, /dev/hisi_hdc are missing" in result.reason
    assert "pass them into the container too" in result.reason


def test_npus_without_torch_npu_say_what_to_install(
    accelbackends_tree: FakeTree, accelbackends_stack: FakeStack
) -> None:
    result = detect(ascend_node(accelbackends_tree, 2), site(accelbackends_stack, torch_npu=False))
    assert not result.available
    assert result.reason.endswith(
        "but torch_npu is not installed — install torch-npu, the release that matches your "
        "torch and CANN versions"
    )


def test_driver_version_is_read_from_the_recorded_install_path(
    accelbackends_tree: FakeTree,
) -> None:
    tree = ascend_node(accelbackends_tree, 1, driver="25.0.rc1", install_path="/opt/ascend")
    assert probe.driver_version(tree.probe()) == "25.0.rc1"


def test_a_missing_driver_version_is_said_not_guessed(
    accelbackends_tree: FakeTree, accelbackends_stack: FakeStack
) -> None:
    result = detect(ascend_node(accelbackends_tree, 1, driver=None), site(accelbackends_stack))
    assert result.available
    assert "(no driver version.info found)" in result.reason


def test_habana_installed_beside_torch_npu_is_noted(
    accelbackends_tree: FakeTree, accelbackends_stack: FakeStack
) -> None:
    result = detect(ascend_node(accelbackends_tree, 2), site(accelbackends_stack, habana=True))
    assert result.available
    assert "habana-torch-plugin 1.21.0 (Habana) is installed too" in result.reason
    assert "init() checks that torch_npu's is the one in use" in result.reason


def test_visible_devices_narrow_the_count(
    accelbackends_tree: FakeTree, accelbackends_stack: FakeStack
) -> None:
    tree = ascend_node(accelbackends_tree, 8)
    result = detect(tree, site(accelbackends_stack), {"ASCEND_RT_VISIBLE_DEVICES": "4,5,6"})
    assert (result.available, result.device_count) == (True, 3)
    assert result.reason.endswith("; ASCEND_RT_VISIBLE_DEVICES='4,5,6' shows 3")


def test_visible_ids_beyond_the_node_are_named(
    accelbackends_tree: FakeTree, accelbackends_stack: FakeStack
) -> None:
    tree = ascend_node(accelbackends_tree, 4)
    result = detect(tree, site(accelbackends_stack), {"ASCEND_RT_VISIBLE_DEVICES": "1,3,8"})
    assert result.device_count == 2
    assert "shows 2 (IDs 8 do not exist: this node's NPUs are 0 to 3)" in result.reason


def test_malformed_visible_devices_stay_detected_but_are_flagged_for_init(
    accelbackends_tree: FakeTree, accelbackends_stack: FakeStack
) -> None:
    tree = ascend_node(accelbackends_tree, 4)
    result = detect(tree, site(accelbackends_stack), {"ASCEND_RT_VISIBLE_DEVICES": "1, 2"})
    assert (result.available, result.device_count) == (True, 4)
    assert "ASCEND_RT_VISIBLE_DEVICES='1, 2' is not valid" in result.reason
    assert result.reason.endswith("(init() will refuse it)")


def test_the_probe_imports_neither_torch_nor_torch_npu(
    accelbackends_tree: FakeTree, accelbackends_stack: FakeStack
) -> None:
    ascend_node(accelbackends_tree, 1)
    code = (
        "import sys, accelbackends_ascend\n"
        "from accelbackends.testing import FakeTree\n"
        f"probe = FakeTree({str(accelbackends_tree.root)!r}).probe("
        f"packages={list(site(accelbackends_stack))!r})\n"
        "print(accelbackends_ascend.SPEC.detect(probe).device_count)\n"
        "print(sorted(m for m in ('torch', 'torch_npu') if m in sys.modules))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["1", "[]"]


def test_selection_prefers_the_npu_over_the_cpu_with_hccl(
    accelbackends_tree: FakeTree,
    accelbackends_stack: FakeStack,
    accelbackends_registry: RegistryFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ascend_node(accelbackends_tree, 2)
    # A registry's probes read installed-package metadata from sys.path.
    monkeypatch.syspath_prepend(site(accelbackends_stack)[0])
    registry = accelbackends_registry(plugins={"ascend": accelbackends_ascend})
    selection = accelbackends.select(registry=registry)
    assert (selection.accelerator, selection.backend) == ("npu", "hccl")
    assert (selection.status.plugin, selection.status.detection.device_count) == ("ascend", 2)
