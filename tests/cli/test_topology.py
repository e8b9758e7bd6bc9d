"""What judges a node, as ``info`` shows it: each GPU's links and health from a fake NVML and
sysfs tree per topology, the NICs from sysfs, the collective library; each fact with where it
was read, a missing fact said."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from accelbackends.cli import info
from accelbackends.plugin.links import pcie_generation, read_nics
from accelbackends.registry.facade import Registry
from accelbackends.testing import nvml
from accelbackends.testing.tree import FakeTree


def _address(index: int) -> str:
    return f"/sys/bus/pci/devices/0000:{index + 0x17:02x}:00.0"


def _node(root: Path, count: int, *, narrow: int | None = None) -> FakeTree:
    tree = FakeTree(root).nvidia(count)
    for index in range(count):
        width = 8 if index == narrow else 16
        tree.pcie(_address(index), 5, width, max_width=16)
        tree.write(f"{_address(index)}/numa_node", f"{index // 4}\n")
    return tree


def _links(tree: FakeTree, env: dict[str, str] | None = None) -> dict:
    report = info.collect(Registry(root=tree.root, env=env or {"ACCELBACKENDS_NVML": nvml.MODULE}))
    return report["links"]


@pytest.fixture(autouse=True)
def _forget_fake_nvml():
    yield
    nvml.reset()


def test_nvlink_node_lists_every_gpu_with_its_links_numa_and_sources(tmp_path):
    tree = _node(tmp_path, 8).infiniband("mlx5_0", 400)
    nvml.configure(
        [nvml.FakeGpu(uuid=f"GPU-{i}", name="NVIDIA H200", nvlinks=(1,) * 18) for i in range(8)]
    )
    links = _links(tree)
    assert links["accelerator"] == "cuda"
    assert [d["model"] for d in links["devices"]] == ["NVIDIA H200"] * 8
    first = links["devices"][0]
    assert (first["nvlinks"], first["nvlinks_total"], first["link_kind"]) == (18, 18, "nvlink")
    assert first["pcie"] == {
        "generation": 5,
        "width": 16,
        "max_generation": 5,
        "max_width": 16,
        "narrowed": False,
    }
    assert [d["numa_node"] for d in links["devices"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert first["sources"]["nvlink"] == f"NVML ({nvml.MODULE})"
    assert first["sources"]["pcie"].endswith("/sys/bus/pci/devices/0000:17:00.0")
    assert first["health"] == []
    assert links["nics"] == [
        {
            "name": "mlx5_0/1",
            "kind": "infiniband",
            "gbps": 400.0,
            "state": "ACTIVE",
            "up": True,
            "source": str(tree.path("/sys/class/infiniband/mlx5_0/ports/1/rate")),
            "missing": None,
        }
    ]


def test_pcie_node_without_nvlink_says_pcie_and_a_narrow_link_is_marked(tmp_path):
    tree = _node(tmp_path, 2, narrow=1)
    nvml.configure([nvml.FakeGpu(uuid=f"GPU-{i}", name="NVIDIA H100 PCIe") for i in range(2)])
    links = _links(tree)
    kinds = [(d["nvlinks_total"], d["link_kind"]) for d in links["devices"]]
    assert kinds == [(0, "pcie"), (0, "pcie")]
    assert links["devices"][1]["pcie"]["narrowed"] is True
    text = "\n".join(
        info.render(
            info.collect(Registry(root=tree.root, env={"ACCELBACKENDS_NVML": nvml.MODULE}))
        ).splitlines()
    )
    assert "Gen5 x8 (max Gen5 x16) NARROW" in text


def test_info_initialises_nvml_once_for_detection_and_links(tmp_path, monkeypatch):
    tree = _node(tmp_path, 2)
    nvml.configure([nvml.FakeGpu(uuid=f"GPU-{i}", name="NVIDIA H100 PCIe") for i in range(2)])
    calls: list[str] = []
    monkeypatch.setattr(nvml, "nvmlInit", lambda: calls.append("init"))
    monkeypatch.setattr(nvml, "nvmlShutdown", lambda: calls.append("shutdown"))
    registry = Registry(root=tree.root, env={"ACCELBACKENDS_NVML": nvml.MODULE})
    report = info.collect(registry)
    # Both readers asked NVML: detection (the GPUs' names) and links (each GPU's PCIe).
    cuda = next(a for a in report["accelerators"] if a["name"] == "cuda")
    assert "2 NVIDIA GPUs via NVML (NVIDIA H100 PCIe" in cuda["reason"]
    assert [d["model"] for d in report["links"]["devices"]] == ["NVIDIA H100 PCIe"] * 2
    assert calls == ["init", "shutdown"]
    # Outside info, each query opens and closes NVML itself, as before.
    calls.clear()
    Registry(root=tree.root, env={"ACCELBACKENDS_NVML": nvml.MODULE}).detect()
    assert calls == ["init", "shutdown"]


def test_health_signals_from_nvml_are_named_per_gpu(tmp_path):
    tree = _node(tmp_path, 3)
    nvml.configure(
        [
            nvml.FakeGpu(uuid="GPU-0", ecc_uncorrected=2),
            nvml.FakeGpu(uuid="GPU-1", remapped=(True, False), retired_pending=True),
            nvml.FakeGpu(uuid="GPU-2", throttle=0x40 | 0x1),  # idle (0x1) is no fault
        ]
    )
    health = [d["health"] for d in _links(tree)["devices"]]
    assert health == [
        ["ECC: 2 uncorrected memory errors since the driver loaded"],
        [
            "retired pages pending: the GPU needs a reset to retire them",
            "row remapping pending: the GPU needs a reset",
        ],
        ["throttled: HW thermal slowdown (reasons 0x41)"],
    ]


def test_without_nvml_the_gpus_come_from_the_driver_and_nvml_facts_are_said_missing(tmp_path):
    tree = _node(tmp_path, 2)
    links = _links(tree, {"ACCELBACKENDS_NVML": "off"})
    first = links["devices"][0]
    assert first["model"] == "NVIDIA H100 80GB HBM3"  # from /proc/driver/nvidia/gpus
    assert first["nvlinks"] is None and first["link_kind"] is None
    assert first["missing"]["nvlink"] == "not read: NVML is turned off by ACCELBACKENDS_NVML=off"
    assert first["pcie"]["width"] == 16  # sysfs needs no NVML


def test_a_cpu_node_says_why_no_device_is_listed_and_what_the_library_is(tmp_path):
    tree = FakeTree(tmp_path).ethernet("eth0", None, up=False)
    tree.write("/sys/class/net/veth1/speed", "10000\n")  # virtual: no device link
    links = _links(tree)
    assert links["devices"] == []
    assert links["devices_missing"] == "not read: the cpu plugin does not report its devices' links"
    assert links["collective_library"]["name"] == "Gloo"
    assert links["collective_library"]["source"].startswith("part of torch ")
    (eth0,) = links["nics"]
    assert eth0["gbps"] is None and "the interface is down" in eth0["missing"]


def test_a_roce_port_and_its_netdev_are_one_nic(tmp_path):
    tree = (
        FakeTree(tmp_path).infiniband("mlx5_1", 200, link_layer="Ethernet").ethernet("ens1", 200000)
    )
    tree.write("/sys/class/infiniband/mlx5_1/device/net/ens1/ifindex", "3\n")
    nics = read_nics(tree.probe())
    assert [(n.name, n.kind, n.gbps) for n in nics] == [("mlx5_1/1", "roce", 200.0)]


def test_pcie_generation_from_the_kernels_speed_text():
    assert [pcie_generation(f"{s} GT/s PCIe") for s in ("2.5", "8.0", "32.0", "64.0")] == [
        1,
        3,
        5,
        6,
    ]
    assert pcie_generation("Unknown") is None


def test_info_reads_links_without_importing_torch(tmp_path):
    tree = _node(tmp_path, 2)
    env = nvml.environment([nvml.FakeGpu(uuid=f"GPU-{i}", nvlinks=(1, 1)) for i in range(2)])
    code = (
        "import sys, json, accelbackends.cli.main as m\n"
        "sys.argv=['accelbackends','info','--json']\n"
        "try: m.main()\n"
        "except SystemExit: pass\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    import os

    result = subprocess.run(
        [sys.executable, "-c", code],
        env=os.environ | env | {"ACCELBACKENDS_PROBE_ROOT": str(tree.root)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert "torch was imported" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    assert [d["nvlinks"] for d in report["links"]["devices"]] == [2, 2]
