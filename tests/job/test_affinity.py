"""CPU and NUMA affinity per local rank: the plan on fake machines, and pinning for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import accelbackends
from accelbackends.accelerators import cuda, hpu, xpu
from accelbackends.cli import info
from accelbackends.job import affinity
from accelbackends.job.affinity import CPU_AFFINITY, plan, plan_for, read_topology
from accelbackends.plugin import (
    AcceleratorSpec,
    AcceleratorStatus,
    ClusterInfo,
    ConfigError,
    Detection,
    Locality,
    Probe,
)
from accelbackends.plugin.locality import format_cpulist, parse_cpulist
from accelbackends.testing import FakeTree

Cli = Callable[..., subprocess.CompletedProcess[str]]
NODE0_SMT = frozenset({*range(0, 8), *range(16, 24)})
NODE1_SMT = frozenset({*range(8, 16), *range(24, 32)})


def cpus(text: str) -> frozenset[int]:
    parsed = parse_cpulist(text)
    assert parsed is not None
    return parsed


def two_socket_gpu_node(tmp_path: Path, *, smt: bool = True) -> FakeTree:
    """2 sockets of 8 cores, GPUs 0-3 on NUMA node 0 and 4-7 on node 1."""
    return (
        FakeTree(tmp_path / "root")
        .cpus(sockets=2, cores=8, smt=smt)
        .nvidia(8, numa=[0, 0, 0, 0, 1, 1, 1, 1])
    )


def gpu_plan(
    tree: FakeTree, mode: str, ranks: int, env: dict[str, str] | None = None
) -> affinity.Plan:
    probe = tree.probe(env)
    assert cuda.SPEC.locality is not None
    return plan(
        mode,
        read_topology(probe),
        ranks,
        accelerator="cuda",
        device_type="cuda",
        localities=cuda.SPEC.locality(probe),
    )


def _unavailable(probe: Probe) -> Detection:
    return Detection(False)


def _unbound(request: object) -> None:
    return None


def status_of(spec: AcceleratorSpec, devices: int) -> AcceleratorStatus:
    return AcceleratorStatus(spec, spec.name, "", "", Detection(True, devices, "test"))


# -- cpulists and the setting -------------------------------------------------------------------


def test_cpulists_parse_and_format_as_the_kernel_writes_them() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == frozenset({0, 1, 2, 3, 8, 10, 11})
    assert format_cpulist({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    assert parse_cpulist("") == frozenset()
    assert parse_cpulist("3-1") is None and parse_cpulist("0-63:2/8") is None
    assert parse_cpulist(None) is None


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        ("numa", "numa"),
        ("EXCLUSIVE", "exclusive"),
        ("1", "auto"),
        ("on", "auto"),
        ("true", "auto"),
        ("off", "off"),
        ("0", "off"),
        ("", "off"),
    ],
)
def test_variable_values_choose_the_mode(value: str, mode: str) -> None:
    assert affinity.resolve_mode(None, {CPU_AFFINITY: value}) == mode


def test_argument_wins_over_the_variable_and_takes_a_bool() -> None:
    assert affinity.resolve_mode("numa", {CPU_AFFINITY: "exclusive"}) == "numa"
    assert affinity.resolve_mode(True, {}) == "auto"
    assert affinity.resolve_mode(False, {CPU_AFFINITY: "on"}) == "off"
    assert affinity.resolve_mode(None, {}) == "off"


def test_invalid_value_names_the_variable_and_the_accepted_values() -> None:
    with pytest.raises(ConfigError) as raised:
        affinity.resolve_mode(None, {CPU_AFFINITY: "sockets"})
    message = str(raised.value)
    assert f"{CPU_AFFINITY}='sockets' is not valid" in message
    assert all(word in message for word in ("off", "numa", "exclusive", "on"))
    with pytest.raises(ConfigError, match="cpu_affinity=3 is not valid"):
        affinity.resolve_mode(3, {})


def test_init_refuses_an_invalid_setting_before_doing_anything() -> None:
    registry = accelbackends.Registry(env={CPU_AFFINITY: "sometimes"})
    with pytest.raises(ConfigError, match=CPU_AFFINITY):
        accelbackends.init(registry=registry)
    assert not accelbackends.is_initialized()


def test_spawn_refuses_an_invalid_argument_before_starting_ranks() -> None:
    with pytest.raises(ConfigError, match="cpu_affinity='all' is not valid"):
        accelbackends.spawn(print, 2, cpu_affinity="all")


def test_a_locality_that_is_not_callable_is_refused_at_declaration() -> None:
    with pytest.raises(TypeError, match="locality must be callable"):
        AcceleratorSpec(
            "odd",
            "cpu",
            1,
            ("gloo",),
            "gloo",
            detect=_unavailable,
            bind=_unbound,
            locality="numa",  # type: ignore[arg-type]
        )


# -- a 2-socket, 8-GPU node ---------------------------------------------------------------------


def test_gpus_report_their_numa_node_and_local_cpus_from_sysfs(tmp_path: Path) -> None:
    tree = two_socket_gpu_node(tmp_path)
    assert cuda.SPEC.locality is not None
    found = cuda.SPEC.locality(tree.probe())
    assert [item.numa_node for item in found if item] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert found[0] == Locality(0, NODE0_SMT, "0000:17:00.0")
    assert found[7] == Locality(1, NODE1_SMT, "0000:1e:00.0")


def test_numa_mode_gives_each_rank_its_gpus_whole_node(tmp_path: Path) -> None:
    result = gpu_plan(two_socket_gpu_node(tmp_path), "numa", 8)
    assert [r.numa_node for r in result.ranks] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(r.cpus == NODE0_SMT for r in result.ranks[:4])
    assert all(r.cpus == NODE1_SMT for r in result.ranks[4:])
    assert [r.device for r in result.ranks] == [f"cuda:{i}" for i in range(8)]


def test_exclusive_mode_splits_each_node_keeping_smt_siblings_together(tmp_path: Path) -> None:
    result = gpu_plan(two_socket_gpu_node(tmp_path), "exclusive", 8)
    shares = [r.cpus for r in result.ranks]
    assert shares[0] == {0, 1, 16, 17}  # two whole cores: each with its sibling
    assert shares[4] == {8, 9, 24, 25}
    assert all(shares[i] <= NODE0_SMT for i in range(4))
    assert all(shares[i] <= NODE1_SMT for i in range(4, 8))
    assert len(frozenset().union(*shares)) == sum(len(s) for s in shares) == 32
    assert result.notes == ()


def test_exclusive_mode_without_smt_gives_whole_cores(tmp_path: Path) -> None:
    result = gpu_plan(two_socket_gpu_node(tmp_path, smt=False), "exclusive", 8)
    assert [format_cpulist(r.cpus) for r in result.ranks] == [
        "0-1",
        "2-3",
        "4-5",
        "6-7",
        "8-9",
        "10-11",
        "12-13",
        "14-15",
    ]
    assert not result.topology.smt


def test_visible_devices_decide_which_gpus_the_ranks_sit_near(tmp_path: Path) -> None:
    tree = two_socket_gpu_node(tmp_path)
    result = gpu_plan(tree, "exclusive", 2, {"CUDA_VISIBLE_DEVICES": "5,6"})
    assert [r.numa_node for r in result.ranks] == [1, 1]
    assert result.ranks[0].cpus | result.ranks[1].cpus == NODE1_SMT
    assert not result.ranks[0].cpus & result.ranks[1].cpus


def test_more_ranks_than_cores_split_smt_siblings_and_say_so(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path).cpus(cores=2, smt=True)
    result = plan("exclusive", read_topology(tree.probe()), 4)
    assert sorted(format_cpulist(r.cpus) for r in result.ranks) == ["0", "1", "2", "3"]
    assert any("SMT siblings are split" in note for note in result.notes)


def test_exclusive_mode_refuses_more_ranks_than_cpus_and_auto_shares_them(tmp_path: Path) -> None:
    topology = read_topology(FakeTree(tmp_path).cpus(cores=2).probe())
    with pytest.raises(ConfigError) as raised:
        plan("exclusive", topology, 3)
    assert f"{CPU_AFFINITY}=exclusive: 3 local ranks would share 2 CPUs (0-1)" in str(raised.value)
    assert "numa" in str(raised.value)
    shared = plan("auto", topology, 3)
    assert all(r.cpus == {0, 1} for r in shared.ranks)
    assert any("they share them" in note for note in shared.notes)


def test_gpus_without_locality_are_said_to_report_none(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path).cpus(sockets=2, cores=4).nvidia(2)
    result = gpu_plan(tree, "exclusive", 2)
    assert [r.locality for r in result.ranks] == ["no locality reported"] * 2
    assert [format_cpulist(r.cpus) for r in result.ranks] == ["0-3", "4-7"]
    assert any("report no locality" in note for note in result.notes)


def test_a_plugin_whose_locality_raises_is_named_and_planned_without_it(tmp_path: Path) -> None:
    def broken(probe: object) -> list[Locality]:
        raise OSError("sysfs went away")

    spec = AcceleratorSpec(
        "odd", "odd", 1, ("gloo",), "gloo", detect=_unavailable, bind=_unbound, locality=broken
    )
    registry = accelbackends.Registry(env={}, root=FakeTree(tmp_path).cpus().root)
    result = plan_for(registry, status_of(spec, 1), 1, "numa")
    assert (
        "plugin 'odd' failed to report device locality: OSError: sysfs went away"
        in (result.notes[0])
    )
    assert result.ranks[0].cpus == {0, 1, 2, 3}


# -- other devices ------------------------------------------------------------------------------


def test_xpu_node_places_each_rank_on_its_gpus_node(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path).cpus(sockets=2, cores=4).intel_gpu(numa=0).intel_gpu(numa=1)
    spec = xpu.make_spec()
    assert spec.locality is not None
    probe = tree.probe()
    found = spec.locality(probe)
    assert [(item.numa_node, item.source) for item in found if item] == [
        (0, "0000:03:00.0"),
        (1, "0000:04:00.0"),
    ]
    result = plan(
        "exclusive",
        read_topology(probe),
        2,
        accelerator="xpu",
        device_type="xpu",
        localities=found,
    )
    assert [format_cpulist(r.cpus) for r in result.ranks] == ["0-3", "4-7"]
    masked = spec.locality(tree.probe({"ZE_AFFINITY_MASK": "1.0"}))
    assert [item.numa_node for item in masked if item] == [1]


def test_gaudi_modules_report_locality_by_module_id(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path).cpus(sockets=2, cores=4).gaudi(2, numa=[1, 0])
    assert hpu.SPEC.locality is not None
    found = hpu.SPEC.locality(tree.probe({"HABANA_VISIBLE_MODULES": "1"}))
    assert [item.numa_node for item in found if item] == [0]


def test_cpu_ranks_are_spread_over_numa_nodes_then_split(tmp_path: Path) -> None:
    topology = read_topology(FakeTree(tmp_path).cpus(sockets=2, cores=4).probe())
    result = plan("exclusive", topology, 4)
    assert [r.numa_node for r in result.ranks] == [0, 0, 1, 1]
    assert [format_cpulist(r.cpus) for r in result.ranks] == ["0-1", "2-3", "4-5", "6-7"]


# -- a mask narrowed by the scheduler or the cgroup ---------------------------------------------


def test_a_mask_narrowed_by_the_scheduler_is_what_gets_split(tmp_path: Path) -> None:
    tree = two_socket_gpu_node(tmp_path, smt=False).affinity("4-11")
    topology = read_topology(tree.probe())
    assert topology.allowed == cpus("4-11")
    assert "Cpus_allowed_list" in topology.allowed_from
    result = gpu_plan(tree, "exclusive", 8)
    assert [format_cpulist(r.cpus) for r in result.ranks] == [str(c) for c in range(4, 12)]
    assert [r.numa_node for r in result.ranks] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_an_injected_allowed_set_overrides_what_the_tree_says(tmp_path: Path) -> None:
    tree = two_socket_gpu_node(tmp_path, smt=False)
    topology = read_topology(tree.probe(), allowed=cpus("12-15"))
    assert topology.allowed == cpus("12-15") and topology.allowed_from == "given"


@pytest.mark.parametrize("version", [1, 2])
def test_the_cgroup_cpuset_narrows_the_allowed_cpus(tmp_path: Path, version: int) -> None:
    tree = FakeTree(tmp_path).cpus(cores=8).cpuset("2-5", version=version)
    topology = read_topology(tree.probe())
    assert topology.allowed == cpus("2-5")
    assert "cgroup cpuset" in topology.allowed_from


def test_a_device_whose_cpus_are_not_allowed_falls_back_to_the_allowed_ones(
    tmp_path: Path,
) -> None:
    tree = two_socket_gpu_node(tmp_path, smt=False).affinity("0-3")
    result = gpu_plan(tree, "numa", 8)
    assert result.ranks[7].cpus == cpus("0-3")
    assert any("outside the CPUs this process may use (0-3)" in n for n in result.notes)


# -- info ----------------------------------------------------------------------------------------


def test_info_section_shows_device_numa_node_and_cpus_per_local_rank(tmp_path: Path) -> None:
    registry = accelbackends.Registry(env={}, root=two_socket_gpu_node(tmp_path).root)
    cluster = ClusterInfo(launcher="single")
    report = affinity.collect(registry, status_of(cuda.SPEC, 8), cluster)
    assert report["mode"] == "off" and report["planned_as"] == "auto"
    assert report["local_world_size"] == 8
    assert report["ranks"][5] == {
        "local_rank": 5,
        "device": "cuda:5",
        "numa_node": 1,
        "cpus": "10-11,26-27",
        "cpu_count": 4,
        "locality": "0000:1c:00.0",
    }
    text = "\n".join(info.render_affinity(report))
    assert f"cpu affinity: off ({CPU_AFFINITY}=on would pin 8 local ranks of cuda" in text
    assert "5           cuda:5  1          10-11,26-27 (4)" in text


def test_info_says_when_devices_report_no_locality(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path).cpus(cores=4).nvidia(2)
    registry = accelbackends.Registry(env={CPU_AFFINITY: "numa"}, root=tree.root)
    report = affinity.collect(registry, status_of(cuda.SPEC, 2), ClusterInfo(launcher="single"))
    assert report["applied"]
    text = "\n".join(info.render_affinity(report))
    assert "note: the cuda devices report no locality" in text


def test_info_reports_the_plan_without_importing_torch(cli: Cli) -> None:
    result = cli("info", "--json", env={CPU_AFFINITY: "exclusive"})
    assert result.returncode == 0, result.stderr
    section = json.loads(result.stdout)["cpu_affinity"]
    assert section["mode"] == "exclusive" and section["applied"]
    assert section["ranks"][0]["device"] == "cpu" and section["ranks"][0]["cpus"]
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, accelbackends.cli.info as i, accelbackends as a;"
            "i.render(i.collect(a.default_registry()));"
            "print('torch' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, CPU_AFFINITY: "on"},
        check=True,
    )
    assert probe.stdout.strip() == "False"


def test_info_exits_2_naming_an_invalid_setting(cli: Cli) -> None:
    result = cli("info", env={CPU_AFFINITY: "sockets"})
    assert result.returncode == 2
    assert f"{CPU_AFFINITY}='sockets' is not valid" in result.stderr
    assert "Traceback" not in result.stderr


def test_info_text_has_the_section(tmp_path: Path) -> None:
    registry = accelbackends.Registry(env={}, root=FakeTree(tmp_path).cpus(cores=2).root)
    text = info.render(info.collect(registry))
    assert "cpu affinity: off" in text and "local rank  device  numa node  cpus" in text


# -- for real on this machine -------------------------------------------------------------------


def _pinned(ctx: accelbackends.Context) -> tuple[list[int], int, list[int] | None, str]:
    import torch

    return (
        sorted(os.sched_getaffinity(0)),
        torch.get_num_threads(),
        None if ctx.cpus is None else sorted(ctx.cpus),
        ctx.cpu_affinity,
    )


def _two_cpus_or_skip() -> set[int]:
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        pytest.skip(f"needs 2 allowed CPUs to give 2 ranks their own; this process has {allowed}")
    return allowed


def test_two_cpu_ranks_with_exclusive_affinity_get_disjoint_cpus() -> None:
    allowed = _two_cpus_or_skip()
    results = accelbackends.spawn(_pinned, 2, cpu_affinity="exclusive")
    (cpus0, threads0, ctx0, mode0), (cpus1, threads1, ctx1, _) = results
    assert cpus0 and cpus1 and not set(cpus0) & set(cpus1)
    assert set(cpus0) | set(cpus1) <= allowed
    assert (ctx0, ctx1) == (cpus0, cpus1) and mode0 == "exclusive"
    assert (threads0, threads1) == (len(cpus0), len(cpus1))
    assert os.sched_getaffinity(0) == allowed  # the parent is left alone


def test_the_variable_turns_it_on_for_spawned_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    _two_cpus_or_skip()
    monkeypatch.setenv(CPU_AFFINITY, "on")
    (cpus0, _, _, mode), (cpus1, _, _, _) = accelbackends.spawn(_pinned, 2)
    assert mode == "auto" and cpus0 and cpus1 and not set(cpus0) & set(cpus1)


def test_with_affinity_off_nothing_changes() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    results = accelbackends.spawn(_pinned, 2)
    assert [(cpus, ctx_cpus, mode) for cpus, _, ctx_cpus, mode in results] == [
        (allowed, None, "off"),
        (allowed, None, "off"),
    ]


def test_a_failed_init_leaves_affinity_and_threads_as_it_found_them() -> None:
    _two_cpus_or_skip()
    script = textwrap.dedent(
        """
        import os, socket, torch, accelbackends
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        before = (os.sched_getaffinity(0), torch.get_num_threads())
        cluster = accelbackends.ClusterInfo(
            launcher="test", rank=0, world_size=2, local_rank=0, local_world_size=2,
            master_addr="127.0.0.1", master_port=port,
        )
        try:
            accelbackends.init(cluster=cluster, cpu_affinity="exclusive", rendezvous_timeout=1)
        except accelbackends.RendezvousError:
            pass
        print(before == (os.sched_getaffinity(0), torch.get_num_threads()))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.stdout.strip() == "True", result.stderr


def test_check_follows_the_variable(cli: Cli) -> None:
    _two_cpus_or_skip()
    result = cli(
        "check",
        "--nproc",
        "2",
        "--json",
        "--max-bytes",
        "4KiB",
        env={CPU_AFFINITY: "exclusive"},
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["cpu_affinity"] == "exclusive"
    bad = cli("check", "--nproc", "2", env={CPU_AFFINITY: "sockets"})
    assert bad.returncode == 2 and CPU_AFFINITY in bad.stderr


def test_ranks_left_without_free_cpus_are_said_to_share(tmp_path: Path) -> None:
    topology = read_topology(FakeTree(tmp_path).cpus(sockets=2, cores=1).probe())
    result = plan(
        "exclusive",
        topology,
        3,
        accelerator="odd",
        device_type="odd",
        localities=[Locality(0, None, "card0"), Locality(1, None, "card1"), None],
    )
    assert [format_cpulist(r.cpus) for r in result.ranks] == ["0", "1", "0-1"]
    assert "local rank 2 has no CPUs left that other ranks do not use, and share 0-1" in (
        " ".join(result.notes)
    )


def test_a_second_init_asking_for_another_affinity_mode_is_refused() -> None:
    ctx = accelbackends.init(accelerator="cpu", cpu_affinity="off")
    assert (ctx.cpu_affinity, ctx.cpus) == ("off", None)
    assert accelbackends.init(cpu_affinity=False) is ctx
    with pytest.raises(ConfigError, match="already ran with cpu_affinity='off'"):
        accelbackends.init(cpu_affinity="exclusive")
