"""``accelbackends check`` as a preflight: the link plan, who is blamed, thresholds, baselines,
the node lists and --quick. The judging is pure (no torch) and tested on made-up figures; the
command is run for real over Gloo. The multi-node runs are in ``test_preflight_netns.py``."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

import accelbackends
from accelbackends.cli.check.links import plan
from accelbackends.cli.check.thresholds import (
    BaselineRow,
    Floor,
    below_baseline,
    below_floors,
    parse_min_busbw,
    read_baseline,
)
from accelbackends.cli.check.verdicts import INTER, INTRA, judge_links, node_verdict
from accelbackends.plugin.errors import ConfigError
from cli.check.test_check import QUICK

# -- the plan --------------------------------------------------------------------------------------


def test_four_one_rank_nodes_pair_every_node_with_every_other_in_three_rounds() -> None:
    rounds = plan(["a", "b", "c", "d"])
    assert len(rounds) == 3
    pairs = [(a, b) for r in rounds for _, a, b in r]
    assert sorted(pairs) == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    for r in rounds:  # no rank in two exchanges at once
        ranks = [x for _, a, b in r for x in (a, b)]
        assert len(ranks) == len(set(ranks))
    assert {kind for r in rounds for kind, _, _ in r} == {INTER}


def test_two_nodes_of_two_ranks_pair_within_each_node_then_rail_to_rail() -> None:
    rounds = plan(["a", "a", "b", "b"])
    assert rounds == [[(INTRA, 0, 1), (INTRA, 2, 3)], [(INTER, 0, 2), (INTER, 1, 3)]]


def test_odd_node_count_gives_each_node_a_bye_and_rounds_are_capped() -> None:
    rounds = plan(["a", "b", "c"])
    assert sorted((a, b) for r in rounds for _, a, b in r) == [(0, 1), (0, 2), (1, 2)]
    assert len(plan([f"n{i}" for i in range(40)], max_rounds=3)) == 3
    assert plan(["a"]) == []


# -- who is blamed ---------------------------------------------------------------------------------


def _link(a: int, b: int, gbps: float, *, kind: str = INTER, ok: bool = True) -> dict[str, Any]:
    hosts = {0: "n0", 1: "n1", 2: "n2", 3: "n3"} if kind == INTER else {}
    return {
        "kind": kind,
        "ranks": [a, b],
        "hosts": [hosts.get(a, "n0"), hosts.get(b, "n0")],
        "gbps": gbps,
        "ok": ok,
        "detail": "" if ok else f"rank {b} received 7 from rank {a}, expected {a + 1}",
    }


def _all_pairs(speed: dict[tuple[int, int], float]) -> list[dict[str, Any]]:
    return [_link(a, b, speed.get((a, b), 10.0)) for a in range(4) for b in range(a + 1, 4)]


def test_node_whose_every_link_is_slow_is_blamed_alone() -> None:
    links = _all_pairs({(0, 2): 0.1, (1, 2): 0.2, (2, 3): 0.1})
    culprits = judge_links(links, 0.3)
    assert [(c.kind, c.hosts, c.ranks) for c in culprits] == [("node", ("n2",), (2,))]
    assert "every link to the other nodes is slow" in culprits[0].reason
    assert "median of 10 GB/s" in culprits[0].reason
    assert [link["slow"] for link in links] == [False, True, False, True, False, True]


def test_with_three_nodes_the_median_of_best_links_still_finds_the_slow_one() -> None:
    # Two of the three links run through n2: the median *link* would be a slow one.
    links = [_link(0, 1, 10.0), _link(0, 2, 0.5), _link(1, 2, 0.4)]
    culprits = judge_links(links, 0.3)
    assert [(c.kind, c.hosts) for c in culprits] == [("node", ("n2",))]


def test_one_slow_link_is_blamed_as_a_link_naming_both_ends() -> None:
    links = _all_pairs({(1, 3): 0.5})
    culprits = judge_links(links, 0.3)
    assert [(c.kind, c.hosts, c.ranks) for c in culprits] == [("link", ("n1", "n3"), (1, 3))]
    assert culprits[0].text().startswith("link n1 rank 1 <-> n3 rank 3: the link is slow")


def test_link_with_wrong_data_fails_whatever_its_speed() -> None:
    links = _all_pairs({})
    links[0]["ok"], links[0]["detail"] = False, "rank 1 received 7 from rank 0, expected 1"
    (culprit,) = judge_links(links, 0.3)
    assert culprit.kind == "link" and "wrong data received" in culprit.reason


def test_rank_whose_links_are_all_slow_is_blamed_not_its_node() -> None:
    # Two nodes of two ranks: rank 3 (n1's second device) is slow within its node and across.
    links = [
        {**_link(0, 1, 10.0, kind=INTRA), "hosts": ["n0", "n0"]},
        {**_link(2, 3, 0.5, kind=INTRA), "hosts": ["n1", "n1"]},
        {**_link(0, 2, 10.0), "hosts": ["n0", "n1"]},
        {**_link(1, 3, 0.5), "hosts": ["n0", "n1"]},
    ]
    culprits = judge_links(links, 0.3)
    assert [(c.kind, c.hosts, c.ranks) for c in culprits] == [("rank", ("n1",), (3,))]


def test_healthy_links_blame_nobody_and_every_node_passes() -> None:
    links = _all_pairs({(0, 1): 4.0})  # within 0.3 x the median: jitter, not a fault
    assert judge_links(links, 0.3) == []
    report = {"ranks": _ranks(4), "hosts": ["n0", "n1", "n2", "n3"], "checks": [], "error": None}
    verdict = node_verdict(report, [])
    assert verdict["verdict"] == "PASSED"
    assert (verdict["failing_nodes"], verdict["passing_nodes"]) == ([], ["n0", "n1", "n2", "n3"])


def _ranks(n: int) -> list[dict[str, Any]]:
    return [{"rank": r, "host": f"n{r}"} for r in range(n)]


def test_failed_check_names_the_host_of_its_rank() -> None:
    checks = [
        {"name": "all_reduce sum float32", "ok": False, "detail": "rank 1: ...", "ranks": [1]},
        {"name": "broadcast float32", "ok": True, "detail": "", "ranks": []},
    ]
    report = {"ranks": _ranks(3), "hosts": ["n0", "n1", "n2"], "checks": checks, "error": None}
    verdict = node_verdict(report, [])
    assert (verdict["verdict"], verdict["failing_nodes"]) == ("FAILED", ["n1"])
    assert verdict["passing_nodes"] == ["n0", "n2"]
    assert verdict["culprits"][0]["reason"] == "wrong or failed collective: all_reduce sum float32"


def test_a_threshold_miss_of_several_nodes_fails_the_job_saying_no_node_is_pinned() -> None:
    rows = [{"op": "all_reduce", "bytes": 1024, "busbw_gbps": 1.0}]
    misses = below_floors(rows, parse_min_busbw("2"))
    report = {"ranks": _ranks(2), "hosts": ["n0", "n1"], "checks": [], "error": None}
    verdict = node_verdict(report, [], misses)
    assert verdict["verdict"] == "FAILED" and verdict["failing_nodes"] == []
    assert verdict["passing_nodes"] == ["n0", "n1"] and verdict["culprits"] == []
    assert verdict["unpinned"] == [
        "1 size below the busbw floor (a collective of every rank missed it)"
    ]
    text = _verdict_text(report, verdict)
    assert "not pinned to a node: 1 size below the busbw floor (a collective" in text


def test_a_threshold_or_baseline_miss_of_a_one_node_job_fails_that_node() -> None:
    rows = [
        {"op": "all_reduce", "bytes": 1024, "busbw_gbps": 1.0, "noise": 0.1},
        {"op": "all_gather", "bytes": 1024, "busbw_gbps": 1.0, "noise": 0.1},
    ]
    misses = below_floors(rows, parse_min_busbw("2"))
    baseline = (BaselineRow("all_reduce", 1024, 10.0, 0.1),)
    misses += below_baseline(rows, baseline, 0.7, "base.json")[0]
    ranks = [{"rank": r, "host": "vm"} for r in range(2)]
    report = {"ranks": ranks, "hosts": ["vm"], "checks": [], "error": None}
    verdict = node_verdict(report, [], misses)
    assert (verdict["verdict"], verdict["failing_nodes"], verdict["passing_nodes"]) == (
        "FAILED",
        ["vm"],
        [],
    )
    assert verdict["culprits"] == [
        {
            "kind": "node",
            "hosts": ["vm"],
            "ranks": [0, 1],
            "reason": "the job's only node: 2 sizes below the busbw floor; "
            "1 size below the baseline",
        }
    ]
    assert verdict["unpinned"] == []
    lines = _verdict_text(report, verdict).splitlines()
    assert lines[0].startswith(
        "verdict: FAILED: 2 sizes below the busbw floor, 1 size below the baseline ("
    )
    assert lines[1:4] == [
        "failing nodes (1 of 1): vm",
        "passing nodes (0 of 1): -",
        "  node vm (ranks 0, 1): the job's only node: 2 sizes below the busbw floor; "
        "1 size below the baseline",
    ]


def test_a_problem_with_the_limits_fails_the_job_and_is_pinned_on_no_node() -> None:
    report = {"ranks": _ranks(1), "hosts": ["n0"], "checks": [], "error": None}
    problem = "--min-busbw 1 MiB=5: that size was not swept (sizes from 1 KiB to 8 KiB)"
    verdict = node_verdict(report, [], (), [problem])
    assert verdict["verdict"] == "FAILED" and verdict["failing_nodes"] == []
    assert verdict["unpinned"] == [problem]
    assert f"not pinned to a node: {problem}" in _verdict_text(report, verdict).splitlines()


def _verdict_text(report: dict[str, Any], verdict: dict[str, Any]) -> str:
    from accelbackends.cli.check.report import verdict as text

    whole = {"accelerator": "cpu", "backend": "gloo", "world_size": len(report["ranks"])}
    return text(whole | {"bandwidth": [], "device_copy": None} | report | verdict)


# -- thresholds and baselines ---------------------------------------------------------------


def test_min_busbw_takes_gbps_or_size_gbps_pairs() -> None:
    assert parse_min_busbw("20") == (Floor(None, 20.0, "--min-busbw"),)
    assert parse_min_busbw("1MiB=5,64MiB=20.5") == (
        Floor(1 << 20, 5.0, "--min-busbw"),
        Floor(64 << 20, 20.5, "--min-busbw"),
    )


@pytest.mark.parametrize("text", ["", "fast", "0", "-3", "1MiB=", "1XB=3", "5,1MiB=3"])
def test_min_busbw_rejects_what_is_not_gbps_or_pairs(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="SIZE=GBPS"):
        parse_min_busbw(text)


def test_floor_without_size_holds_at_each_operations_largest_size() -> None:
    rows = [
        {"op": "all_reduce", "bytes": 1024, "busbw_gbps": 0.1},
        {"op": "all_reduce", "bytes": 2048, "busbw_gbps": 0.5},
        {"op": "all_gather", "bytes": 2040, "busbw_gbps": 2.0},  # rounded down on 3 ranks
    ]
    misses = below_floors(rows, parse_min_busbw("1"))
    assert [(m.op, m.nbytes) for m in misses] == [("all_reduce", 2048)]
    assert misses[0].text() == "all_reduce 2 KiB: busbw 0.5 GB/s below --min-busbw 1 GB/s"
    sized = below_floors(rows, parse_min_busbw("2KiB=3"))
    assert [(m.op, m.nbytes) for m in sized] == [("all_reduce", 2048), ("all_gather", 2040)]


def test_baseline_fails_size_by_size_below_the_fraction_with_the_noise_beside_it() -> None:
    baseline = [
        BaselineRow("all_reduce", 1024, 1.0, 0.05),
        BaselineRow("all_reduce", 2048, 2.0, 0.3),
    ]
    rows = [
        {"op": "all_reduce", "bytes": 1024, "busbw_gbps": 0.8, "noise": 0.02},
        {"op": "all_reduce", "bytes": 2048, "busbw_gbps": 1.0, "noise": 0.1},
        {"op": "all_gather", "bytes": 2048, "busbw_gbps": 0.1, "noise": None},  # not in it
    ]
    misses, compared = below_baseline(rows, baseline, 0.7, "old.json")
    assert compared == 2
    assert [(m.nbytes, m.limit_gbps, m.noise) for m in misses] == [(2048, 1.4, 0.3)]
    assert misses[0].text() == (
        "all_reduce 2 KiB: busbw 1 GB/s, 0.50 of the baseline's 2 GB/s (below "
        "--baseline-fraction 0.7; the method's own noise there: 30%; baseline old.json)"
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read it"),
        ("not json", "is not JSON"),
        ('{"ok": true, "bandwidth": []}', "has no bandwidth rows"),
        ('{"bandwidth": [{"op": "all_reduce"}]}', "lacks op, bytes or busbw_gbps"),
    ],
)
def test_unusable_baseline_is_bad_input_naming_the_file(
    tmp_path: Path, content: str | None, expected: str
) -> None:
    path = tmp_path / "base.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=expected) as caught:
        read_baseline(str(path))
    assert str(caught.value).startswith(f"--baseline={path}")


# -- the plugin's expected bandwidth -----------------------------------------------------------


def _spec(**extra: Any) -> accelbackends.AcceleratorSpec:
    return accelbackends.AcceleratorSpec(
        name="fab",
        device_type="cpu",
        priority=1,
        backends=("gloo",),
        default_backend="gloo",
        detect=lambda probe: accelbackends.Detection(True, 1, "test"),
        bind=lambda request: None,
        **extra,
    )


def test_expected_busbw_must_be_a_positive_number() -> None:
    assert _spec(expected_busbw_gbps=25).expected_busbw_gbps == 25
    assert _spec().expected_busbw_gbps is None
    for bad in (0, -1.0, "25", True):
        with pytest.raises(TypeError, match="expected_busbw_gbps must be a positive number"):
            _spec(expected_busbw_gbps=bad)


FABRIC_PLUGIN = """
import accelbackends

@accelbackends.hookimpl
def accelbackends_declare_accelerators():
    return [
        accelbackends.AcceleratorSpec(
            name="fabric",
            device_type="cpu",
            priority=5,
            backends=("gloo",),
            default_backend="gloo",
            detect=lambda probe: accelbackends.Detection(True, 1, "fake, for the preflight tests"),
            bind=lambda request: __import__("torch").device("cpu"),
            expected_busbw_gbps=5000.0,
        )
    ]
"""


@pytest.mark.slow
def test_plugins_expected_busbw_is_shown_by_info_and_held_by_check(plugin_dist: Any) -> None:
    site = plugin_dist("fabric", FABRIC_PLUGIN)
    info = run_cli("info", "--json", pythonpath=site)
    (entry,) = [a for a in json.loads(info.stdout)["accelerators"] if a["name"] == "fabric"]
    assert entry["expected_busbw_gbps"] == 5000.0
    text = run_cli("info", pythonpath=site).stdout
    assert "fabric: its plugin expects a busbw of 5000 GB/s" in text
    result = run_cli("check", "--json", *QUICK, pythonpath=site)
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    # The job's only node is the one below the floor.
    assert report["verdict"] == "FAILED" and report["failing_nodes"] == report["hosts"]
    assert {m["source"] for m in report["misses"]} == {
        f"the {entry['plugin']} plugin's expected busbw"
    }
    assert {(m["op"], m["limit_gbps"]) for m in report["misses"]} == {
        ("all_reduce", 5000.0),
        ("all_gather", 5000.0),
    }
    # One rank measures no collective bandwidth: the plugin's floor is not held to it.
    alone = run_cli("check", "--json", "--nproc", "1", *QUICK, pythonpath=site)
    assert alone.returncode == 0, alone.stderr
    report = json.loads(alone.stdout)
    assert report["limits"]["min_busbw"] == [] and report["device_copy"]["gbps"] > 0


# -- the command -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_min_busbw_missed_exits_1_with_the_verdict_naming_the_size(tmp_path: Path) -> None:
    result = run_cli(
        "check",
        *QUICK,
        "--min-busbw",
        "1000",
        "--failing-nodes",
        str(tmp_path / "failing"),
        "--passing-nodes",
        str(tmp_path / "passing"),
    )
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    verdict = next(i for i, line in enumerate(lines) if line.startswith("verdict:"))
    assert lines[verdict].startswith("verdict: FAILED: 2 sizes below the busbw floor (")
    # The job's only node took every rank of the collectives that missed: it is the failing one.
    host = (tmp_path / "failing").read_text().strip()
    assert host and "\n" not in host
    assert lines[verdict + 1 : verdict + 4] == [
        f"failing nodes (1 of 1): {host}",
        "passing nodes (0 of 1): -",
        f"  node {host} (ranks 0, 1): the job's only node: 2 sizes below the busbw floor",
    ]
    assert lines[verdict + 4].startswith("  all_reduce 8 KiB: busbw ")
    assert lines[verdict + 4].endswith(" GB/s below --min-busbw 1000 GB/s")
    assert (tmp_path / "passing").read_text() == ""


@pytest.mark.slow
def test_baseline_of_the_same_machine_passes_and_a_raised_one_fails_naming_sizes(
    tmp_path: Path,
) -> None:
    first = run_cli("check", "--json", *QUICK)
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert all(isinstance(row["noise"], float) for row in report["bandwidth"])
    baseline = tmp_path / "baseline.json"
    baseline.write_text(first.stdout)
    # The same run is its own baseline at a fraction far below its noise.
    again = run_cli(
        "check", "--json", *QUICK, "--baseline", str(baseline), "--baseline-fraction", "0.01"
    )
    assert again.returncode == 0, again.stdout
    assert json.loads(again.stdout)["limits"]["baseline_sizes_compared"] == 8
    # A baseline a hundred times faster than this machine fails at every size.
    for row in report["bandwidth"]:
        row["busbw_gbps"] *= 100
    baseline.write_text(json.dumps(report))
    failing = tmp_path / "failing"
    slower = run_cli("check", *QUICK, "--baseline", str(baseline), "--failing-nodes", str(failing))
    assert slower.returncode == 1
    assert "verdict: FAILED: 8 sizes below the baseline (" in slower.stdout
    assert "  all_gather 8 KiB: busbw " in slower.stdout
    assert "the method's own noise there:" in slower.stdout
    # A one-node job below its baseline: that node fails, in the text, the JSON and the file.
    (host,) = report["hosts"]
    assert f"failing nodes (1 of 1): {host}\npassing nodes (0 of 1): -\n" in slower.stdout
    assert failing.read_text() == f"{host}\n"
    failing.unlink()
    as_json = run_cli(
        "check", "--json", *QUICK, "--baseline", str(baseline), "--failing-nodes", str(failing)
    )
    assert as_json.returncode == 1
    verdict = json.loads(as_json.stdout)
    assert (verdict["failing_nodes"], verdict["passing_nodes"]) == ([host], [])
    assert verdict["culprits"] == [
        {
            "kind": "node",
            "hosts": [host],
            "ranks": [0, 1],
            "reason": "the job's only node: 8 sizes below the baseline",
        }
    ]
    assert verdict["unpinned"] == [] and failing.read_text() == f"{host}\n"


@pytest.mark.slow
def test_json_puts_the_verdict_first_and_lists_the_nodes_and_links() -> None:
    result = run_cli("check", "--json", *QUICK)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert next(iter(report)) == "verdict" and report["verdict"] == "PASSED"
    assert report["passing_nodes"] == report["hosts"] and report["failing_nodes"] == []
    (link,) = report["links"]
    assert (link["kind"], link["ranks"], link["ok"], link["slow"]) == (INTRA, [0, 1], True, False)
    assert link["gbps"] > 0 and link["median_gbps"] == link["gbps"]
    assert report["limits"]["link_factor"] == 0.3


@pytest.mark.slow
def test_quick_mode_sweeps_four_sizes_with_five_calls_each() -> None:
    result = run_cli("check", "--json", "--quick")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["bandwidth"]
    assert [r["bytes"] for r in rows if r["op"] == "all_reduce"] == [
        1 << 20,
        2 << 20,
        4 << 20,
        8 << 20,
    ]
    assert {r["iters"] for r in rows} == {5}


@pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="matplotlib is not installed (it is optional)",
)
def test_plot_marks_the_floors_and_the_baseline(tmp_path: Path) -> None:
    import matplotlib

    from accelbackends.cli.check.report import plot

    matplotlib.rcParams["svg.fonttype"] = "none"  # the labels as text, to be read back
    rows = [
        {"op": op, "bytes": size, "busbw_gbps": 0.5, "noise": 0.1}
        for op in ("all_reduce", "all_gather")
        for size in (1 << 20, 2 << 20)
    ]
    report = {"bandwidth": rows, "accelerator": "cpu", "backend": "gloo", "world_size": 2}
    baseline = tuple(BaselineRow(r["op"], r["bytes"], 1.0, 0.1) for r in rows)
    target = tmp_path / "busbw.svg"
    plot(target, report, parse_min_busbw("1") + parse_min_busbw("2MiB=0.8"), baseline)
    drawn = target.read_text()
    for label in ("--min-busbw 1 GB/s", "--min-busbw 0.8 GB/s", "all_reduce baseline"):
        assert label in drawn


@pytest.mark.slow
def test_quick_text_report_opens_with_the_verdict_and_the_steps_follow() -> None:
    result = run_cli("check", "--quick", "--min-busbw", "1000")
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("verdict: FAILED: 2 sizes below the busbw floor (")
    assert lines[1].startswith("failing nodes (1 of 1): ")
    assert lines[2] == "passing nodes (0 of 1): -"
    assert [line[:5] for line in lines if line.startswith("[")] == [
        "[1/4]",
        "[2/4]",
        "[3/4]",
        "[4/4]",
    ]
    assert lines[-1].startswith("      intra-node  0 <-> 1")  # the link table ends the steps


def test_link_speeds_are_not_judged_where_cpu_ranks_outnumber_the_cores() -> None:
    from types import SimpleNamespace

    from accelbackends.cli.check.links import _crowding
    from accelbackends.plugin.threads import available_cores

    cores = available_cores()

    def ctx(device: str, ranks: int, cpus: tuple[int, ...] = ()) -> Any:
        return SimpleNamespace(
            device=SimpleNamespace(type=device), local_world_size=ranks, cpus=cpus
        )

    crowded = _crowding(ctx("cpu", cores + 1))
    assert f"{cores + 1} CPU ranks share {cores} core" in crowded
    assert _crowding(ctx("cpu", cores)) == ""
    assert _crowding(ctx("cuda", cores + 1)) == ""  # a device's links do not take turns on cores
