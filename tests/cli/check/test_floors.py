"""Floors as data: the thresholds file's format and its errors (file, line, field), the pick of
the rule that matches a topology, and check holding a run to the rule it matched."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from accelbackends.cli.check.floors import SHIPPED, Topology, match, read_rules
from accelbackends.plugin.errors import ConfigError

SHIPPED_RULES = read_rules(SHIPPED, "the shipped thresholds")


def _topology(model=None, link=None, gpus=8, nodes=1, nic=None) -> Topology:
    return Topology(model, link, gpus, nodes, nic)


def test_the_shipped_h200_copy_floor_is_0_8_of_its_spec_and_passes_the_measured_copy():
    rule = match(SHIPPED_RULES, "device_copy", _topology("NVIDIA H200", gpus=1))
    assert rule is not None and rule.gbps == pytest.approx(0.8 * 4800)
    assert rule.gbps < 4260  # an H200's device copy measured 4.26 TB/s read+write


def test_an_8_gpu_nvlink_h100_node_matches_the_nvlink_floor_and_a_pcie_node_the_pcie_one():
    nvlink = match(SHIPPED_RULES, "busbw", _topology("NVIDIA H100 80GB HBM3", "nvlink"))
    pcie = match(SHIPPED_RULES, "busbw", _topology("NVIDIA H100 PCIe", "pcie"))
    assert nvlink is not None and nvlink.link == "nvlink" and nvlink.gbps == 259
    assert pcie is not None and pcie.link == "pcie" and pcie.gbps == 20


def test_a_job_of_several_nodes_matches_only_the_nic_floor_of_its_rate():
    two_nodes = _topology("NVIDIA H200", "nvlink", nodes=2, nic=400.0)
    rule = match(SHIPPED_RULES, "busbw", two_nodes)
    assert rule is not None and rule.link == "nic" and rule.gbps == 32
    assert (
        match(SHIPPED_RULES, "busbw", _topology("NVIDIA H200", "nvlink", nodes=2, nic=200.0))
        is None
    )


def test_no_rule_matches_an_unknown_gpu_or_a_4_gpu_node():
    assert match(SHIPPED_RULES, "device_copy", _topology("Some GPU")) is None
    assert match(SHIPPED_RULES, "busbw", _topology("NVIDIA H200", "nvlink", gpus=4)) is None


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("busbw gbps=abc", "line 2: field gbps: 'abc' is not valid; use a positive number"),
        ("busbw link=ethernet gbps=5", "line 2: field link: 'ethernet' is not valid"),
        ("busbw speed=5 gbps=5", "line 2: field 'speed' is not known"),
        ("floor gbps=5", "line 2: kind 'floor' is not known; use one of device_copy, busbw"),
        ("busbw model=*H200*", "line 2: field gbps is missing"),
        ('busbw gbps=5 why="unclosed', "line 2: No closing quotation"),
        ("busbw gpus=0 gbps=5", "line 2: field gpus: '0' is not valid"),
        ("device_copy link=nvlink gbps=5", "line 2: field link does not apply to device_copy"),
    ],
)
def test_bad_thresholds_name_the_file_the_line_and_the_field(tmp_path, line, said):
    path = tmp_path / "floors.txt"
    path.write_text(f"# a comment\n{line}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        read_rules(path, "--thresholds")
    assert str(error.value).startswith(f"--thresholds={path} {said}")


def test_check_with_bad_thresholds_exits_2_naming_file_and_line(tmp_path):
    path = tmp_path / "floors.txt"
    path.write_text("busbw gbps=-1\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "accelbackends", "check", "--thresholds", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert f"--thresholds={path} line 1: field gbps: '-1' is not valid" in result.stderr


def _check(tmp_path, rules: str, *args: str) -> tuple[int, dict]:
    path = tmp_path / "floors.txt"
    path.write_text(rules, encoding="utf-8")
    failing = tmp_path / "failing"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "accelbackends",
            "check",
            "--json",
            "--quick",
            "--thresholds",
            str(path),
            "--failing-nodes",
            str(failing),
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    report = json.loads(result.stdout)
    report["_failing_file"] = failing.read_text(encoding="utf-8").split()
    return result.returncode, report


def test_one_rank_below_its_device_copy_floor_fails_its_node_and_names_the_rule(tmp_path):
    code, report = _check(
        tmp_path, 'device_copy gbps=100000 why="beyond any CPU"\n', "--nproc", "1"
    )
    assert code == 1 and report["verdict"] == "FAILED"
    (miss,) = report["misses"]
    assert miss["kind"] == "device-copy" and miss["limit_gbps"] == 100000
    assert miss["source"].endswith("floors.txt:1 (beyond any CPU)")
    assert report["failing_nodes"] == report["hosts"] == report["_failing_file"]
    assert report["floors"]["device_copy"]["rule"].startswith("device copy >= 100000 GB/s")


def test_one_rank_does_not_judge_min_busbw_and_says_so_instead_of_refusing(tmp_path):
    code, report = _check(tmp_path, "device_copy gbps=0.001\n", "--nproc", "1", "--min-busbw", "5")
    assert code == 0 and report["verdict"] == "PASSED"
    assert report["not_judged"] == ["--min-busbw: one rank has no collective bandwidth"]
    assert report["limits"]["device_copy"]["gbps"] == 0.001


@pytest.mark.slow
def test_two_ranks_below_a_matched_busbw_floor_fail_with_the_rule_named(tmp_path):
    code, report = _check(tmp_path, 'busbw gpus=2 gbps=100000 why="too high"\n', "--nproc", "2")
    assert code == 1
    assert report["floors"]["busbw"]["rule"].startswith(
        "collective bandwidth >= 100000 GB/s (gpus=2;"
    )
    assert {m["kind"] for m in report["misses"]} == {"min-busbw"}
    assert all(m["source"].endswith("(too high)") for m in report["misses"])
    assert report["failing_nodes"] == report["_failing_file"] == report["hosts"]


def test_no_matching_rule_leaves_correctness_only(tmp_path):
    code, report = _check(tmp_path, "busbw gpus=8 gbps=100000\n", "--nproc", "1")
    assert code == 0
    assert report["floors"]["busbw"] is None and report["floors"]["device_copy"] is None
    assert report["limits"]["min_busbw"] == []


def test_an_nvlink_node_far_below_its_floor_is_named_nvlink_fell_back_to_pcie():
    from accelbackends.cli.check.verdicts import fell_back

    floors = {"busbw": {"link": "nvlink", "gbps": 259.0}}
    slow = {"misses": [{"kind": "min-busbw", "busbw_gbps": 41.0}]}
    assert fell_back(slow, floors).startswith("NVLink fell back to PCIe: busbw 41 GB/s")
    half = {"misses": [{"kind": "min-busbw", "busbw_gbps": 180.0}]}
    assert fell_back(half, floors) is None  # slow, but not at PCIe speed
    assert fell_back(slow, {"busbw": {"link": "pcie", "gbps": 20.0}}) is None


def _bandwidth(hosts: list[str], busbw: float) -> dict:
    rows = [
        {"op": op, "bytes": size, "busbw_gbps": busbw if size == 1 << 30 else busbw / 10}
        for op in ("all_reduce", "all_gather")
        for size in (1 << 20, 1 << 30)
    ]
    return {"hosts": hosts, "bandwidth": rows}


def test_several_nodes_far_below_their_nic_rate_are_named_below_the_nics_line_rate():
    from accelbackends.cli.check.verdicts import below_line_rate

    floors = {"nic_gbps": 400.0}  # 50 GB/s each way
    named = below_line_rate(_bandwidth(["n0", "n1"], 12.0), floors)
    assert named == (
        "below the NIC's line rate: busbw 12 GB/s at the largest size, under 0.5 x the 400 Gb/s "
        "(50 GB/s) of the slowest node's NIC"
    )
    assert below_line_rate(_bandwidth(["n0", "n1"], 46.0), floors) is None  # nccl-tests' figure
    assert below_line_rate(_bandwidth(["n0", "n0"], 12.0), floors) is None  # one node: no NIC
    assert below_line_rate(_bandwidth(["n0", "n1"], 12.0), {"nic_gbps": None}) is None
