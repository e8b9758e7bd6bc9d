"""Each rank's own copies in ``check``, before the collectives: its device memory copy with
several ranks, and its copies between pinned host memory and its GPU each way, held to a
fraction of the PCIe link its GPU supports; a slow one named by GPU and rank."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from accelbackends.cli.check.copies import copy_lines, judge_copies
from accelbackends.cli.check.devicecopy import (
    DEVICE_TO_HOST,
    HOST_TO_DEVICE,
    measure_transfer,
)
from accelbackends.cli.check.floors import SHIPPED, Topology, match, pcie_gbps, read_rules
from accelbackends.plugin.errors import ConfigError

HOST_FLOOR = {"fraction": 0.6, "source": "the floor of floors.txt:27 (0.6 x PCIe)"}


def _entry(rank: int, gpu: int | None, pcie, h2d: float | None, d2h: float | None) -> dict:
    def moved(direction: str, gbps: float | None):
        return None if gbps is None else {"direction": direction, "gbps": gbps}

    return {
        "rank": rank,
        "host": "node-7",
        "device": f"cuda:{rank}",
        "gpu": gpu,
        "pcie": pcie,
        "device_copy": None,
        "host_to_device": moved(HOST_TO_DEVICE, h2d),
        "device_to_host": moved(DEVICE_TO_HOST, d2h),
        "host_copy_missing": None if pcie else "not measured: the PCIe link of GPU 2 was not read",
        "error": None,
    }


def test_the_pcie_rate_is_generation_times_width_per_direction():
    assert pcie_gbps(5, 16) == pytest.approx(63.0, rel=1e-3)
    assert pcie_gbps(4, 16) == pytest.approx(31.5, rel=1e-3)
    assert pcie_gbps(None, 16) is None and pcie_gbps(5, None) is None and pcie_gbps(9, 16) is None


def test_a_slow_host_copy_is_named_per_gpu_with_the_link_it_was_held_to():
    entries = [
        _entry(0, 3, (5, 16), 6.1, 52.0),
        _entry(1, 5, (5, 16), 51.0, 50.0),
        _entry(2, 2, None, None, None),
    ]
    (culprit,) = judge_copies(entries, None, HOST_FLOOR)
    assert (culprit.kind, culprit.hosts, culprit.ranks) == ("device", ("node-7",), (0,))
    assert culprit.text() == (
        "GPU 3 on node-7 (rank 0): host->device 6.1 GB/s, expected >= 37.8 GB/s for PCIe Gen5 "
        "x16 (the floor of floors.txt:27 (0.6 x PCIe))"
    )
    assert [e["ok"] for e in entries] == [False, True, True]
    assert entries[0]["host_copy_floor_gbps"] == pytest.approx(37.805, abs=1e-3)
    assert entries[2]["host_copy_floor_gbps"] is None  # no link read: not judged, and said
    lines = copy_lines(entries)
    assert lines[0] == (
        "GPU 3 on node-7 (rank 0): host->device 6.1 GB/s, device->host 52 GB/s (PCIe Gen5 x16, "
        "floor 37.805): SLOW"
    )
    assert lines[2] == (
        "GPU 2 on node-7 (rank 2): host<->device not measured: the PCIe link of GPU 2 was not "
        "read: ok"
    )


def test_each_ranks_device_copy_is_held_to_the_copy_floor():
    entries = [_entry(r, r, None, None, None) for r in range(2)]
    entries[0]["device_copy"] = {"gbps": 4100.0}
    entries[1]["device_copy"] = {"gbps": 900.0}
    floor = {"gbps": 3840.0, "source": "the floor of floors.txt:9 (0.8 x 4.8 TB/s)"}
    (culprit,) = judge_copies(entries, floor, None)
    assert culprit.text() == (
        "GPU 1 on node-7 (rank 1): device memory copy, read+write 900 GB/s, expected >= 3840 "
        "GB/s (the floor of floors.txt:9 (0.8 x 4.8 TB/s))"
    )
    assert [e["device_copy_floor_gbps"] for e in entries] == [3840.0, 3840.0]


@pytest.mark.parametrize("direction", [HOST_TO_DEVICE, DEVICE_TO_HOST])
def test_a_transfer_counts_each_byte_once(direction):
    import torch

    measured = measure_transfer(torch.device("cpu"), 1 << 20, direction, iters=2, warmup=1)
    assert measured.direction == direction and measured.rate > 0
    assert measured.as_json()["gbps"] == pytest.approx(measured.rate / 1e9, abs=1e-6)
    assert measured.rate == measured.nbytes / measured.seconds
    with pytest.raises(ValueError, match="direction 'host->device' or 'device->host'"):
        measure_transfer(torch.device("cpu"), 1 << 20, "sideways")


def test_the_shipped_host_copy_rule_holds_every_gpu_to_0_6_of_its_link():
    rule = match(read_rules(SHIPPED, "shipped"), "host_copy", Topology(None, None, 8, 1, None))
    assert rule is not None and rule.fraction == 0.6
    assert rule.describe().startswith("host<->device copy >= 0.6 x the GPU's PCIe link rate")


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("host_copy gbps=40", "field fraction is missing; give the floor as fraction=0.6"),
        ("host_copy fraction=1.5", "field fraction: '1.5' is not valid"),
        ("host_copy fraction=0.6 gbps=40", "field gbps does not apply to host_copy"),
        ("busbw fraction=0.6 gbps=4", "field fraction does not apply to busbw; use gbps"),
        ("device_copy fraction=0.6 gbps=4", "field fraction does not apply to device_copy"),
    ],
)
def test_bad_host_copy_rules_name_the_file_the_line_and_the_field(tmp_path, line, said):
    path = tmp_path / "floors.txt"
    path.write_text(f"{line}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        read_rules(path, "--thresholds")
    assert str(error.value).startswith(f"--thresholds={path} line 1: {said}")


def _check(tmp_path, rules: str) -> tuple[int, dict, list[str]]:
    thresholds, failing = tmp_path / "floors.txt", tmp_path / "failing"
    thresholds.write_text(rules, encoding="utf-8")
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
            "--thresholds",
            str(thresholds),
            "--failing-nodes",
            str(failing),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    return result.returncode, json.loads(result.stdout), failing.read_text("utf-8").split()


def test_with_two_ranks_each_rank_measures_its_own_device_copy_and_passes_its_floor(tmp_path):
    code, report, failing = _check(tmp_path, "device_copy gbps=0.001\n")
    assert code == 0, report["verdict"]
    assert [c["rank"] for c in report["copies"]] == [0, 1]
    for entry in report["copies"]:
        assert entry["device_copy"]["gbps"] > 0.001 and entry["device_copy_floor_gbps"] == 0.001
        assert entry["host_copy_missing"].startswith("not measured: a CPU rank's device is host")
        assert entry["ok"] is True
    assert failing == []


def test_with_two_ranks_each_rank_below_the_copy_floor_is_named(tmp_path):
    code, report, failing = _check(tmp_path, 'device_copy gbps=100000 why="beyond any CPU"\n')
    assert code == 1 and report["verdict"] == "FAILED"
    host = report["hosts"][0]
    reasons = [c["reason"] for c in report["culprits"] if c["kind"] == "device"]
    assert [r.split(":")[0] for r in reasons] == [
        f"rank 0 on {host} (cpu)",
        f"rank 1 on {host} (cpu)",
    ]
    assert all("expected >= 100000 GB/s (the floor of" in r for r in reasons)
    assert failing == report["failing_nodes"] == [host]
