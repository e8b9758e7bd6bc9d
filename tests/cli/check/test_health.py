"""The devices' own health in ``check``: each fault named with the GPU and the rank that uses
it (through ``CUDA_VISIBLE_DEVICES``, by index or UUID), a fault on a GPU no rank uses said so;
and, end to end with a fake NVML and sysfs tree, a narrow PCIe link and an ECC/throttle fault
failing the node in the verdict, the JSON and the ``--failing-nodes`` file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelbackends.cli.check.health import device_faults, health_culprits, rank_device
from accelbackends.plugin.types import DeviceLinks, PcieLink
from accelbackends.testing import nvml
from accelbackends.testing.tree import FakeTree

UUIDS = [f"GPU-{i}aaa1111-2222-3333-4444-555566667777" for i in range(4)]


def _devices() -> list[DeviceLinks]:
    return [DeviceLinks(i, "NVIDIA H200", uuid=UUIDS[i]) for i in range(4)]


@pytest.mark.parametrize(
    ("visible", "ordinal", "physical"),
    [
        (None, 2, 2),
        ("3,1", 0, 3),
        ("3,1", 1, 1),
        (f"{UUIDS[2]},{UUIDS[0]}", 1, 0),
        ("GPU-2aaa", 0, 2),  # a UUID prefix, as CUDA accepts it
    ],
)
def test_a_ranks_gpu_is_its_ordinal_through_cuda_visible_devices(visible, ordinal, physical):
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert rank_device("cuda", ordinal, _devices(), env) == (physical, "")


def test_a_cpu_rank_or_an_unlisted_entry_uses_no_known_gpu_and_says_why():
    assert rank_device("cuda", None, _devices(), {}) == (None, "uses no device (a CPU rank)")
    index, why = rank_device("cuda", 0, _devices(), {"CUDA_VISIBLE_DEVICES": "7"})
    assert index is None
    assert why == "not mapped: CUDA_VISIBLE_DEVICES='7' shows no device 0 that is listed"
    index, why = rank_device("npu", 0, _devices(), {})
    assert index is None and "does not know npu's visible-devices rule" in why


def test_faults_name_the_rank_that_uses_the_gpu_and_a_gpu_no_rank_uses_is_said_so():
    devices = [
        DeviceLinks(0, pcie=PcieLink(5, 16, 5, 16)),
        DeviceLinks(1, pcie=PcieLink(5, 8, 5, 16)),
        DeviceLinks(2, health=("ECC: 3 uncorrected memory errors since the driver loaded",)),
    ]
    faults = device_faults(devices)
    assert faults == [
        (1, "PCIe Gen5 x8, expected x16"),
        (2, "ECC: 3 uncorrected memory errors since the driver loaded"),
    ]
    # CUDA_VISIBLE_DEVICES=2,0: rank 0 uses GPU 2, rank 1 GPU 0; nobody uses GPU 1.
    facts = [
        {"host": "n7", "rank": 0, "gpu": 2, "faults": faults},
        {"host": "n7", "rank": 1, "gpu": 0, "faults": []},
    ]
    culprits = health_culprits(facts)
    assert [(c.kind, c.hosts, c.ranks, c.text()) for c in culprits] == [
        (
            "device",
            ("n7",),
            (),
            "GPU 1 on n7 (used by no rank of this run): PCIe Gen5 x8, expected x16",
        ),
        (
            "device",
            ("n7",),
            (0,),
            "GPU 2 on n7 (rank 0): ECC: 3 uncorrected memory errors since the driver loaded",
        ),
    ]


def _gpu_node(root: Path) -> FakeTree:
    tree = FakeTree(root).nvidia(3)
    for index in range(3):
        address = f"/sys/bus/pci/devices/0000:{index + 0x17:02x}:00.0"
        tree.pcie(address, 5, 8 if index == 1 else 16, max_width=16)
    return tree


def test_check_fails_a_node_whose_gpus_are_narrow_or_faulty_naming_each_gpu(tmp_path):
    tree = _gpu_node(tmp_path / "root")
    gpus = [
        nvml.FakeGpu(uuid=UUIDS[0], name="NVIDIA H200"),
        nvml.FakeGpu(uuid=UUIDS[1], name="NVIDIA H200"),
        nvml.FakeGpu(uuid=UUIDS[2], name="NVIDIA H200", ecc_uncorrected=2, throttle=0x40),
    ]
    failing = tmp_path / "failing"
    # CPU ranks on a GPU node (the tree), as on any torch build: the node's GPUs are judged
    # whatever the ranks run on.
    env = os.environ | nvml.environment(gpus)
    env |= {"ACCELBACKENDS_PROBE_ROOT": str(tree.root), "ACCELBACKENDS_ACCELERATOR": "cpu"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "accelbackends",
            "check",
            "--nproc",
            "2",
            "--quick",
            "--json",
            "--failing-nodes",
            str(failing),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    host = report["hosts"][0]
    expected = [
        f"GPU 1 on {host} (used by no rank of this run): PCIe Gen5 x8, expected x16",
        f"GPU 2 on {host} (used by no rank of this run): ECC: 2 uncorrected memory errors "
        "since the driver loaded",
        f"GPU 2 on {host} (used by no rank of this run): throttled: HW thermal slowdown "
        "(reasons 0x40)",
    ]
    assert report["verdict"] == "FAILED"
    assert [c["reason"] for c in report["culprits"] if c["kind"] == "device"] == expected
    assert report["floors"]["health"] == expected
    assert report["failing_nodes"] == [host]
    assert failing.read_text(encoding="utf-8").split() == [host]
    text = subprocess.run(
        [sys.executable, "-m", "accelbackends", "check", "--nproc", "2", "--quick"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert text.returncode == 1
    verdict = text.stdout.splitlines()[0]
    assert verdict.startswith(f"verdict: FAILED: {expected[0]}, {expected[1]}, {expected[2]}")
    assert f"failing nodes (1 of 1): {host}" in text.stdout
