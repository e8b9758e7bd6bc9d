"""``accelbackends check`` as a preflight on a real four-node job: network namespaces joined by a
bridge, one rank per "node", one node slowed for real with a token-bucket filter (``tc ... tbf``).

Each node is a namespace with its own address (``10.125.0.1`` to ``.4``), its own loopback and
its own host name (``node0`` to ``node3``, set in a UTS namespace of its own with ``unshare``),
and a veth whose other end is a port of a bridge in a fifth namespace, the switch; no traffic
touches the machine's network. Slowing a node puts ``tbf`` on both ends of its veth, so both
directions through it are held to `SLOW_RATE`, as a bad NIC or cable would be. (``netem`` is
the usual tool, but this kernel has no ``sch_netem``; ``tbf`` is a real rate limit on the path
itself.) The ranks join with the plain ``env://`` variables, rank i on node i.

Needs root, iproute2 (``ip``, ``tc``) and ``unshare``; skipped, saying why, where any is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_multinode import _clean_env, _ip, _kill_everything_in, _must

from cli.check.test_check import FAKE_COMM

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SUBNET = "10.125.0"
MASTER_PORT = 29425  # each namespace has its own port space, so a fixed port cannot clash
RUN_TIMEOUT = 180.0
#: What a slowed node's link carries each way: a 40th of what a healthy veth carries here
#: (about 500 MB/s through the bridge with the cores shared), far below the link factor.
SLOW_RATE = "100mbit"
#: Small sizes keep each run to seconds even through the slowed node; --quick's three link
#: rounds still pair every node with every other in a job of four.
SWEEP = ("--quick", "--min-bytes", "16KiB", "--max-bytes", "128KiB", "--timeout", "60")


@dataclass(frozen=True)
class Node:
    name: str  # its host name
    namespace: str
    interface: str  # its end of the veth
    port: str  # the other end, on the bridge
    address: str


@dataclass(frozen=True)
class Fabric:
    switch: str  # the namespace that holds the bridge
    nodes: tuple[Node, ...]


@pytest.fixture(scope="module")
def fabric() -> Iterator[Fabric]:
    if os.geteuid() != 0:
        pytest.skip("network namespaces and tc need root; this test runs as a normal user")
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            pytest.skip(f"the preflight test needs `{tool}` (iproute2, util-linux), not on PATH")
    tag = f"pf{os.getpid()}"  # unique per test process, so parallel runs cannot clash
    switch = f"{tag}sw"
    nodes = tuple(
        Node(f"node{i}", f"{tag}n{i}", f"{tag}v{i}", f"{tag}p{i}", f"{SUBNET}.{i + 1}")
        for i in range(4)
    )
    made: list[str] = []
    try:
        for namespace in (switch, *(n.namespace for n in nodes)):
            done = _ip("netns", "add", namespace)
            if done.returncode:
                pytest.skip(f"`ip netns add` failed here: {done.stderr.strip()}")
            made.append(namespace)
        done = _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        if done.returncode:
            pytest.skip(f"cannot create a bridge here: {done.stderr.strip()}")
        _must("-n", switch, "link", "set", "br0", "up")
        for node in nodes:
            # Made inside the switch and moved at once: no end is ever in the machine's network.
            _must(
                "-n",
                switch,
                "link",
                "add",
                node.port,
                "type",
                "veth",
                "peer",
                "name",
                node.interface,
            )
            _must("-n", switch, "link", "set", node.interface, "netns", node.namespace)
            _must("-n", switch, "link", "set", node.port, "master", "br0")
            _must("-n", switch, "link", "set", node.port, "up")
            _must("-n", node.namespace, "addr", "add", f"{node.address}/24", "dev", node.interface)
            _must("-n", node.namespace, "link", "set", node.interface, "up")
            _must("-n", node.namespace, "link", "set", "lo", "up")
        probe = _tc(switch, "add", "dev", "br0", "root", "tbf", *_TBF)
        if probe.returncode:
            pytest.skip(f"`tc qdisc add ... tbf` fails here: {probe.stderr.strip()}")
        _tc(switch, "del", "dev", "br0", "root")
        yield Fabric(switch, nodes)
    finally:
        for namespace in made:
            _kill_everything_in(namespace)
            _ip("netns", "delete", namespace)  # deletes the veths and the bridge with them


_TBF = ("rate", SLOW_RATE, "burst", "32kbit", "latency", "100ms")


def _tc(namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", namespace, "tc", "qdisc", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )


def _slow(fabric: Fabric, node: Node, on: bool) -> None:
    """Hold both directions through ``node``'s link to `SLOW_RATE` (or lift the limit)."""
    for namespace, device in ((node.namespace, node.interface), (fabric.switch, node.port)):
        args = (
            ("add", "dev", device, "root", "tbf", *_TBF) if on else ("del", "dev", device, "root")
        )
        done = _tc(namespace, *args)
        assert done.returncode == 0, f"tc qdisc {' '.join(args)}: {done.stderr}"


@dataclass(frozen=True)
class Run:
    returncodes: list[int]
    stdout: str  # rank 0's
    stderr: str  # every rank's, in order
    seconds: float


def _check(nodes: tuple[Node, ...], *args: str, name_interface: bool = False, **env: str) -> Run:
    """``accelbackends check ARGS`` on every node at once, rank i on node i, under the plain
    ``env://`` variables; each rank in its node's network and with its node's host name (and
    ``GLOO_SOCKET_IFNAME`` set to its interface with ``name_interface``)."""
    procs = []
    began = time.monotonic()
    for rank, node in enumerate(nodes):
        child = _clean_env(
            RANK=str(rank),
            WORLD_SIZE=str(len(nodes)),
            LOCAL_RANK="0",
            LOCAL_WORLD_SIZE="1",
            MASTER_ADDR=nodes[0].address,
            MASTER_PORT=str(MASTER_PORT),
        )
        child.update(env)
        if name_interface:
            child["GLOO_SOCKET_IFNAME"] = node.interface
        argv = [
            *("ip", "netns", "exec", node.namespace, "unshare", "--uts", "sh", "-c"),
            'hostname "$0" && exec "$@"',
            node.name,
            *(sys.executable, "-m", "accelbackends", "check", *args),
        ]
        procs.append(
            subprocess.Popen(
                argv,
                env=child,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        )
    outputs: list[tuple[str, str]] = []
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        for proc in procs:
            outputs.append(proc.communicate(timeout=max(0.1, deadline - time.monotonic())))
    finally:
        if any(proc.poll() is None for proc in procs):
            for node in nodes:
                _kill_everything_in(node.namespace)
    stderr = "\n".join(f"--- rank {i} ---\n{err}" for i, (_, err) in enumerate(outputs) if err)
    return Run([p.returncode for p in procs], outputs[0][0], stderr, time.monotonic() - began)


@pytest.fixture(scope="module")
def healthy(fabric: Fabric, tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Path]:
    """One healthy run with --json: its report is the later runs' baseline."""
    folder = tmp_path_factory.mktemp("healthy")
    run = _check(
        fabric.nodes,
        "--json",
        *SWEEP,
        "--failing-nodes",
        str(folder / "failing.txt"),
        "--passing-nodes",
        str(folder / "passing.txt"),
    )
    baseline = folder / "baseline.json"
    baseline.write_text(run.stdout)
    return run, folder


def _report(run: Run) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(run.stdout)
    return report


def test_healthy_nodes_all_pass_exit_0_and_are_listed_as_passing(
    healthy: tuple[Run, Path],
) -> None:
    run, folder = healthy
    assert run.returncodes == [0, 0, 0, 0], run.stderr + run.stdout[-6000:]
    report = _report(run)
    assert (report["verdict"], report["ok"]) == ("PASSED", True)
    assert report["hosts"] == ["node0", "node1", "node2", "node3"]
    assert report["passing_nodes"] == report["hosts"] and report["failing_nodes"] == []
    assert (folder / "passing.txt").read_text() == "node0\nnode1\nnode2\nnode3\n"
    assert (folder / "failing.txt").read_text() == ""
    # Every pair of the four nodes was measured, one link each, and none is slow.
    pairs = sorted(tuple(link["hosts"]) for link in report["links"])
    assert len(pairs) == 6 and len(set(pairs)) == 6
    assert not any(link["slow"] or not link["ok"] for link in report["links"])


def test_slowed_node_alone_is_named_written_to_failing_nodes_and_fails_its_baseline(
    fabric: Fabric, healthy: tuple[Run, Path], tmp_path: Path
) -> None:
    _, before = healthy
    slowed = fabric.nodes[2]
    _slow(fabric, slowed, on=True)
    try:
        run = _check(
            fabric.nodes,
            *SWEEP,
            "--baseline",
            str(before / "baseline.json"),
            "--failing-nodes",
            str(tmp_path / "failing.txt"),
            "--passing-nodes",
            str(tmp_path / "passing.txt"),
        )
    finally:
        _slow(fabric, slowed, on=False)
    print(run.stdout)  # the operator's view, shown with pytest -s
    assert run.returncodes[0] == 1, run.stderr
    assert (tmp_path / "failing.txt").read_text() == "node2\n"
    assert (tmp_path / "passing.txt").read_text() == "node0\nnode1\nnode3\n"
    lines = run.stdout.splitlines()
    verdict = 0  # --quick: the verdict first, then the steps that led to it
    assert lines[verdict].startswith("verdict: FAILED: node node2 slow")
    assert lines[verdict + 1] == "failing nodes (1 of 4): node2"
    assert lines[verdict + 2] == "passing nodes (3 of 4): node0, node1, node3"
    steps = lines.index(next(line for line in lines if line.startswith("[1/4] environment")))
    assert "      links: 6 point-to-point exchanges" in "\n".join(lines[steps:])
    details = lines[verdict + 3 : steps]
    assert any(
        line.startswith("  node node2 (rank 2): every link to the other nodes") for line in details
    )
    assert not any(line.startswith(("  link ", "  rank ")) for line in details)
    # The baseline's misses are the whole job's: every rank took part in the collectives.
    assert any(
        re.fullmatch(
            r"not pinned to a node: \d+ sizes? below the baseline \(a collective of every rank "
            r"missed it\)",
            line,
        )
        for line in details
    ), details
    # The baseline names each size the slowed job missed, with the method's noise beside it.
    missed = [line for line in details if "of the baseline's" in line]
    assert missed, details
    for line in missed:
        assert re.match(
            r"  all_(reduce|gather) (16|32|64|128) KiB: busbw [0-9.e-]+ GB/s, 0\.\d\d of the ", line
        )
        assert "the method's own noise there: " in line
    assert re.search(r", \d+ sizes? below the baseline \(", lines[verdict])


def test_rank_with_wrong_results_names_its_node_as_the_only_failing_one(
    fabric: Fabric, plugin_dist: Any, tmp_path: Path
) -> None:
    site = plugin_dist("fakecomm", FAKE_COMM)
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
        "ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD": "0",
        "ACCELBACKENDS_BACKEND": "lying",  # rank 1's all_reduce sums are off by one
    }
    # init() names Gloo's interface for backends called gloo only; the fake backend's own Gloo
    # group is told here, as a site running a third-party backend over Gloo would.
    run = _check(
        fabric.nodes[:3],
        "--json",
        *SWEEP,
        "--failing-nodes",
        str(tmp_path / "f"),
        name_interface=True,
        **env,
    )
    report = _report(run)
    assert report["backend"] == "lying", (report["error"], run.stderr)
    assert run.returncodes[0] == 1
    assert (report["verdict"], report["failing_nodes"]) == ("FAILED", ["node1"])
    assert report["passing_nodes"] == ["node0", "node2"]
    assert (tmp_path / "f").read_text() == "node1\n"
    (culprit,) = report["culprits"]
    assert (culprit["hosts"], culprit["ranks"]) == (["node1"], [1])
    assert "all_reduce sum float32" in culprit["reason"]


def test_a_job_far_below_its_nodes_nic_rate_is_named_below_the_nics_line_rate(
    fabric: Fabric, tmp_path: Path
) -> None:
    from accelbackends.testing.tree import FakeTree

    # Each node declares one 2 Gb/s InfiniBand port (0.25 GB/s) in a fake sysfs tree, the NIC
    # facts `info` reads; the slowed node holds every collective to 100 Mbit/s, a 20th of it.
    tree = FakeTree(tmp_path / "root").infiniband("mlx5_0", 2)
    slowed = fabric.nodes[1]
    _slow(fabric, slowed, on=True)
    try:
        run = _check(
            fabric.nodes,
            "--json",
            *SWEEP,
            "--failing-nodes",
            str(tmp_path / "failing.txt"),
            ACCELBACKENDS_PROBE_ROOT=str(tree.root),
        )
    finally:
        _slow(fabric, slowed, on=False)
    report = _report(run)
    from accelbackends.cli.check.report import verdict

    print(verdict(report))  # the operator's view, shown with pytest -s
    assert run.returncodes[0] == 1, run.stderr
    assert report["floors"]["nic_gbps"] == 2.0
    (named,) = [s for s in report["signatures"] if s.startswith("below the NIC's line rate: ")]
    assert named.endswith("under 0.5 x the 2 Gb/s (0.25 GB/s) of the slowest node's NIC")
    # Every rank took part in the collectives: the job fails without the signature naming a node.
    assert named in report["unpinned"] and named in report["problems"]
