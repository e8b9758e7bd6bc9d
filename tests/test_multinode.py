"""A real two-node job on one machine: two network namespaces joined by a veth pair.

Each namespace is a host with its own address (``10.123.0.1`` and ``10.123.0.2``) and its own
loopback; the veth ends live only inside the namespaces, so no traffic touches the machine's
network. The same four ranks (two per "node") are started twice: by one ``torchrun`` per node
with a c10d rendezvous on the first node's address, and directly with the variables ``srun``
would give them. Each rank runs ``accelbackends.init()`` and an all_reduce and reports back.

Needs root and iproute2; skipped, saying why, where namespaces cannot be made.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from accelbackends.testing.cluster import clean_environment

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

SUBNET = "10.123.0"
RDZV_PORT = 29400  # each namespace has its own port space, so a fixed port cannot clash
RUN_TIMEOUT = 150.0

RANK_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import torch.distributed as dist
    import accelbackends

    ctx = accelbackends.init(rendezvous_timeout=90, timeout=90)
    value = torch.tensor([float(ctx.rank + 1)])
    dist.all_reduce(value)
    gathered = [None] * ctx.world_size
    dist.all_gather_object(gathered, os.environ["GLOO_SOCKET_IFNAME"])
    report = {
        "rank": ctx.rank,
        "world_size": ctx.world_size,
        "local_rank": ctx.local_rank,
        "local_world_size": ctx.local_world_size,
        "node_rank": ctx.node_rank,
        "launcher": ctx.launcher,
        "master_addr": ctx.master_addr,
        "sum": value.item(),
        "interfaces": gathered,
    }
    accelbackends.destroy()
    with open(os.path.join(sys.argv[1], f"rank{ctx.rank}.json"), "w") as out:
        json.dump(report, out)
    """
)


@dataclass(frozen=True)
class Host:
    namespace: str
    interface: str
    address: str


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


def _kill_everything_in(namespace: str) -> None:
    """Kill every process in one of this test's namespaces: torchrun starts its workers in
    sessions of their own, so killing the launcher's process group would leave them behind."""
    listed = _ip("netns", "pids", namespace)
    for pid in listed.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def _must(*args: str) -> None:
    done = _ip(*args)
    if done.returncode:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


@pytest.fixture(scope="module")
def two_hosts() -> Iterator[tuple[Host, Host]]:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root; this test runs as a normal user")
    if shutil.which("ip") is None:
        pytest.skip("network namespaces need the `ip` command (iproute2), which is not on PATH")
    tag = f"ab{os.getpid()}"  # unique per test process, so parallel runs cannot clash
    hosts = (
        Host(f"{tag}n0", f"{tag}v0", f"{SUBNET}.1"),
        Host(f"{tag}n1", f"{tag}v1", f"{SUBNET}.2"),
    )
    made: list[str] = []
    try:
        for host in hosts:
            done = _ip("netns", "add", host.namespace)
            if done.returncode:
                pytest.skip(f"`ip netns add` failed here: {done.stderr.strip()}")
            made.append(host.namespace)
        done = _ip(
            "link", "add", hosts[0].interface, "type", "veth", "peer", "name", hosts[1].interface
        )
        if done.returncode:
            pytest.skip(f"cannot create a veth pair here: {done.stderr.strip()}")
        for host in hosts:
            # Moved into its namespace at once: the pair never carries traffic outside them.
            _must("link", "set", host.interface, "netns", host.namespace)
            _must("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", host.interface)
            _must("-n", host.namespace, "link", "set", host.interface, "up")
            _must("-n", host.namespace, "link", "set", "lo", "up")
        yield hosts
    finally:
        for namespace in made:
            _kill_everything_in(namespace)
            _ip("netns", "delete", namespace)  # deletes the veth end inside it, and so the pair


def _clean_env(**extra: str) -> dict[str, str]:
    # Launcher variables the test process may itself have been started with (CI inside srun or
    # torchrun) must not reach the ranks, nor an interface name: init() must find that itself.
    env = clean_environment(os.environ)
    env.pop("GLOO_SOCKET_IFNAME", None)
    # Torch logs store errors with C++ stack frames; a failure here is reported through the
    # rank's own exception instead.
    env.update(
        ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD="1",
        TORCH_CPP_LOG_LEVEL="ERROR",
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


def _run_all(commands: list[tuple[Host, list[str], dict[str, str]]], logs: Path) -> list[str]:
    """Start every command in its namespace, wait for all (bounded), return their outputs."""
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    timed_out = False
    try:
        for index, (host, argv, env) in enumerate(commands):
            log = logs / f"proc{index}.log"
            with log.open("wb") as out:
                procs.append(
                    (
                        subprocess.Popen(
                            ["ip", "netns", "exec", host.namespace, *argv],
                            env=env,
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            start_new_session=True,
                        ),
                        log,
                    )
                )
        deadline = time.monotonic() + RUN_TIMEOUT
        for proc, _ in procs:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        if any(proc.poll() is None for proc, _ in procs):
            for namespace in sorted({host.namespace for host, _, _ in commands}):
                _kill_everything_in(namespace)
        for proc, _ in procs:
            proc.wait(timeout=30)
    outputs = [log.read_text(errors="replace") for _, log in procs]
    failed = [
        f"--- process {i} exited {proc.returncode} ---\n{out[-3000:]}"
        for i, ((proc, _), out) in enumerate(zip(procs, outputs, strict=True))
        if proc.returncode
    ]
    why = f"killed after {RUN_TIMEOUT:g} s; " if timed_out else ""
    assert not failed, why + "\n".join(failed)
    return outputs


def _reports(directory: Path) -> list[dict[str, object]]:
    reports = [json.loads(p.read_text()) for p in sorted(directory.glob("rank*.json"))]
    return sorted(reports, key=lambda r: int(str(r["rank"])))


def _check(reports: list[dict[str, object]], launcher: str, hosts: tuple[Host, Host]) -> None:
    assert [r["rank"] for r in reports] == [0, 1, 2, 3]
    for report in reports:
        rank = int(str(report["rank"]))
        assert report["launcher"] == launcher
        assert report["world_size"] == 4
        assert report["local_world_size"] == 2
        assert report["local_rank"] == rank % 2
        assert report["node_rank"] == rank // 2
        assert report["master_addr"] == hosts[0].address
        assert report["sum"] == 1.0 + 2.0 + 3.0 + 4.0
        # Gloo really used each namespace's own link: two ranks per interface.
        assert report["interfaces"] == [hosts[0].interface] * 2 + [hosts[1].interface] * 2


def test_torchrun_on_two_namespaced_hosts_all_reduces_across_four_ranks(
    two_hosts: tuple[Host, Host], tmp_path: Path
) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    first = two_hosts[0]
    commands = []
    for node, host in enumerate(two_hosts):
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "2",
            "--nproc-per-node",
            "2",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"{first.address}:{RDZV_PORT}",
            "--rdzv-id",
            f"accelbackends-{os.getpid()}",
            # The namespaces share this machine's host name, which resolves to loopback: the
            # store host must be named, and each agent must advertise its own address.
            "--rdzv-conf",
            f"is_host={node == 0}",
            "--local-addr",
            host.address,
            str(script),
            str(tmp_path),
        ]
        # Gloo alone would listen on what the host name resolves to, loopback here: init()
        # must find the link towards MASTER_ADDR itself (no GLOO_SOCKET_IFNAME is given).
        commands.append((host, argv, _clean_env()))
    _run_all(commands, tmp_path)
    _check(_reports(tmp_path), "torchrun", two_hosts)


def test_srun_variables_on_two_namespaced_hosts_all_reduce_across_four_ranks(
    two_hosts: tuple[Host, Host], tmp_path: Path
) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    job = str(100000 + os.getpid())
    commands = []
    for rank in range(4):
        node, local = divmod(rank, 2)
        host = two_hosts[node]
        # What srun gives task `rank` of `srun -N 2 --ntasks-per-node 2` (see slurm.py); the
        # node names are the hosts' addresses, so nothing needs to resolve them.
        env = _clean_env(
            SLURM_JOB_ID=job,
            SLURM_JOBID=job,
            SLURM_JOB_NODELIST=f"{SUBNET}.[1-2]",
            SLURM_JOB_NUM_NODES="2",
            SLURM_NNODES="2",
            SLURM_NTASKS="4",
            SLURM_NPROCS="4",
            SLURM_TASKS_PER_NODE="2(x2)",
            SLURM_NTASKS_PER_NODE="2",
            SLURM_STEP_ID="0",
            SLURM_STEPID="0",
            SLURM_STEP_NODELIST=f"{SUBNET}.[1-2]",
            SLURM_STEP_NUM_NODES="2",
            SLURM_STEP_NUM_TASKS="4",
            SLURM_STEP_TASKS_PER_NODE="2(x2)",
            SLURM_PROCID=str(rank),
            SLURM_LOCALID=str(local),
            SLURM_NODEID=str(node),
            SLURM_GTIDS=f"{2 * node},{2 * node + 1}",
        )
        commands.append((host, [sys.executable, str(script), str(tmp_path)], env))
    _run_all(commands, tmp_path)
    _check(_reports(tmp_path), "slurm", two_hosts)
