"""Real multi-process init through the plugins, with fake vendor stacks and a fake machine.

Each test starts two ranks the way torchrun does; every rank runs
``python -m accelbackends.testing.rank_program``, which initialises through ``accelbackends.init()``
with probes pointed at a fake tree, and reports what it bound and which backend carried the
collectives. The fake packages reach the ranks only through ``PYTHONPATH``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from accelbackends.plugin import torchcompat
from accelbackends.testing import FakeStack, FakeTree, launch_ranks
from accelbackends.testing.rank_program import parse

pytestmark = pytest.mark.slow

RANKS = 2


def run(
    tree: FakeTree, stack: FakeStack, *extra: str, nprocs: int = RANKS, **env: str
) -> list[dict[str, Any]]:
    argv = [
        sys.executable,
        "-m",
        "accelbackends.testing.rank_program",
        "--root",
        str(tree.root),
        *extra,
    ]
    results = launch_ranks(argv, nprocs, env=stack.env({**_base_env(), **env}), timeout=90)
    reports = [parse(result.stdout) for result in results]
    for result, report in zip(results, reports, strict=True):
        if "error" not in report:
            assert result.returncode == 0, result.stderr
    return reports


def _base_env() -> dict[str, str]:
    import os

    # Only what the ranks need: no ACCELBACKENDS_* or launcher variables of the test process.
    keep = ("PATH", "HOME", "LANG", "PYTHONPATH", "TMPDIR", "SYSTEMROOT")
    env = {key: os.environ[key] for key in keep if key in os.environ}
    env["TORCH_CPP_LOG_LEVEL"] = "ERROR"
    return env


def assert_collectives_ran(reports: list[dict[str, Any]]) -> None:
    total = float(sum(range(1, RANKS + 1)))
    for rank, report in enumerate(reports):
        assert "error" not in report, report
        assert report["rank"] == rank
        assert report["cpu_sum"] == total
        assert report["device_sum"] == total


def test_hpu_binds_each_rank_to_its_module_and_initialises_hccl(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root").gaudi(8)
    stack = FakeStack(tmp_path / "stack").habana(devices=8)
    reports = run(tree, stack, HABANA_VISIBLE_MODULES="3,5")
    assert_collectives_ran(reports)
    for report, module in zip(reports, ("3", "5"), strict=True):
        assert report["accelerator"] == "hpu"
        assert report["process_group_backend"] == "cpu:gloo,hpu:hccl"
        assert report["device"] == "hpu"
        # The module was chosen before the runtime acquired one.
        assert report["fakes"]["acquired_module_id"] == module


@pytest.mark.skipif(
    torchcompat.release() < (2, 8),
    reason=f"the fake XPU build turns on torch's own xccl support, which torch "
    f"{torch.__version__} lacks (2.8 added xccl)",
)
def test_xpu_initialises_xccl_where_torch_has_it(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root").intel_gpu().intel_gpu()
    stack = FakeStack(tmp_path / "stack").xpu_torch(version="2.13.0+xpu", devices=2, xccl=True)
    reports = run(tree, stack)
    assert_collectives_ran(reports)
    for rank, report in enumerate(reports):
        assert report["accelerator"] == "xpu"
        assert report["backend"] == "xccl"
        assert report["process_group_backend"] == "cpu:gloo,xpu:xccl"
        assert report["device"] == f"xpu:{rank}"


def test_xpu_initialises_ccl_from_the_oneccl_bindings_on_an_older_torch(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root").intel_gpu().intel_gpu()
    stack = (
        FakeStack(tmp_path / "stack").xpu_torch(version="2.6.0+xpu", devices=2, xccl=False).oneccl()
    )
    reports = run(tree, stack)
    assert_collectives_ran(reports)
    for rank, report in enumerate(reports):
        assert report["backend"] == "ccl"
        assert report["process_group_backend"] == "cpu:ccl,xpu:ccl"
        # oneCCL saw its rank variables when the bindings were imported.
        assert report["fakes"]["ccl_environment_at_import"] == {
            "CCL_PROCESS_LAUNCHER": "none",
            "CCL_LOCAL_RANK": str(rank),
            "CCL_LOCAL_SIZE": str(RANKS),
        }


def test_backend_override_to_gloo_keeps_the_device_binding(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root").gaudi(2)
    stack = FakeStack(tmp_path / "stack").habana(devices=2)
    reports = run(tree, stack, ACCELBACKENDS_BACKEND="gloo")
    for rank, report in enumerate(reports):
        assert "error" not in report, report
        assert (report["accelerator"], report["backend"]) == ("hpu", "gloo")
        assert report["process_group_backend"] == "gloo"
        assert report["fakes"]["acquired_module_id"] == str(rank)


def test_hccl_taken_over_by_ascend_fails_init_naming_torch_npu(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root").gaudi(2)
    stack = FakeStack(tmp_path / "stack").habana(devices=2).torch_npu()
    # Habana's hccl first, then torch_npu re-registers the name; init's own import is a no-op.
    reports = run(
        tree,
        stack,
        "--preimport",
        "habana_frameworks.torch.distributed.hccl",
        "--preimport",
        "torch_npu",
    )
    refused = {"type": "AssertionError", "message": "HCCL c10d backend already exist"}
    for report in reports:
        # torch 2.4.1 refuses the second registration of a name itself, when torch_npu is
        # imported; 2.11, 2.13 and 2.15 replace it silently, which init() then names. The
        # releases between were not seen: either answer is theirs.
        if torchcompat.release() <= (2, 4) or (
            torchcompat.release() < (2, 11) and report["error"] == refused
        ):
            assert report["error"] == refused
            continue
        assert report["error"]["type"] == "InitError"
        assert "registered by Ascend's torch_npu" in report["error"]["message"]


def test_more_local_ranks_than_visible_gaudi_modules_fails_naming_both_numbers(
    tmp_path: Path,
) -> None:
    tree = FakeTree(tmp_path / "root").gaudi(8)
    stack = FakeStack(tmp_path / "stack").habana(devices=8)
    for report in run(tree, stack, HABANA_VISIBLE_MODULES="4"):
        assert report["error"]["type"] == "ConfigError"
        message = report["error"]["message"]
        assert "2 local ranks but only 1 Gaudi module is visible" in message
        assert "(HABANA_VISIBLE_MODULES='4')" in message
        assert "cannot be shared between processes" in message


def test_a_module_the_runtime_refuses_fails_init_naming_it(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path / "root").gaudi(2)
    stack = FakeStack(tmp_path / "stack").habana(devices=2)
    (report,) = run(tree, stack, nprocs=1, HLS_MODULE_ID="3")
    assert report["error"]["type"] == "InitError"
    assert "is_available() is False with HLS_MODULE_ID=3" in report["error"]["message"]
