"""A throwaway Slurm cluster on this host: ``munged``, ``slurmctld`` and one or two ``slurmd``.

Everything (key, config, state, spool, logs, sockets) lives in one temporary directory; every
daemon runs in the foreground as a child of this process, so it is stopped by its PID and
cannot outlive the test session. Two ``slurmd`` with different ``NodeName``s on one host give a
real two-node allocation. Needs root (``slurmd`` starts the tasks as the job's user) and the
Debian packages ``slurm-wlm`` and ``munge``.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from accelbackends.testing.cluster import clean_environment

__all__ = ["NODES", "RESERVED_PORTS", "SlurmCluster", "missing", "slurm_cluster"]

_BINARIES = ("munged", "slurmctld", "slurmd", "slurmstepd", "srun", "sbatch", "sinfo")
NODES = ("n1", "n2")
CPUS_PER_NODE = 2


def missing() -> str | None:
    """Why a local Slurm cluster cannot be started here, or None when it can."""
    absent = [name for name in _BINARIES if shutil.which(name) is None]
    if absent:
        return f"{', '.join(absent)} not installed (CI installs slurm-wlm and munge)"
    if os.geteuid() != 0:
        return "slurmd must run as root to start tasks"
    return None


@dataclass(frozen=True)
class SlurmCluster:
    root: Path
    env: Mapping[str, str]  # SLURM_CONF and a PATH with Slurm's clients

    def run(
        self, *args: str, timeout: float = 120, **kwargs: object
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # type: ignore[call-overload, no-any-return]
            list(args),
            env=dict(self.env),
            capture_output=True,
            text=True,
            timeout=timeout,
            **kwargs,
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: The ports ``srun --resv-ports`` hands out (MpiParams=ports=...).
RESERVED_PORTS = (15000, 15999)


def _config(root: Path, ctld_port: int, node_ports: Mapping[str, int]) -> str:
    resv_low, resv_high = RESERVED_PORTS
    host = socket.gethostname()
    nodes = "\n".join(
        f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} "
        f"CPUs={CPUS_PER_NODE} State=UNKNOWN"
        for name, port in node_ports.items()
    )
    return f"""\
ClusterName=accelbackends-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser={getpass.getuser()}
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge.socket
CredType=cred/munge
StateSaveLocation={root}/ctld
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
MpiParams=ports={resv_low}-{resv_high}
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
MinJobAge=5
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
{nodes}
PartitionName=test Nodes=ALL Default=YES MaxTime=10 State=UP OverSubscribe=NO
"""


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in reversed(processes):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in reversed(processes):
        try:
            # slurmctld lingers for seconds saving state nobody will read again.
            process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _log_tail(root: Path) -> str:
    return "\n".join(
        f"--- {log.name}\n" + log.read_text(errors="replace")[-2000:] for log in root.glob("*.log")
    )


@contextmanager
def slurm_cluster(
    root: Path, *, nodes: int = 2, start_timeout: float = 60
) -> Iterator[SlurmCluster]:
    """Start munged, slurmctld and ``nodes`` slurmd under ``root``; stop them all on exit."""
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)
    for sub in ("ctld", "spool", *(f"spool/{n}" for n in NODES[:nodes])):
        (root / sub).mkdir(exist_ok=True)
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    conf = root / "slurm.conf"
    node_ports = {name: _free_port() for name in NODES[:nodes]}
    conf.write_text(_config(root, _free_port(), node_ports))
    # A job step must not inherit the test's own launcher variables.
    env = {**clean_environment(os.environ), "SLURM_CONF": str(conf)}
    processes: list[subprocess.Popen[bytes]] = []
    daemon_output = (root / "daemons.out").open("wb")
    try:
        processes.append(
            subprocess.Popen(
                [
                    "munged",
                    "--foreground",
                    "--force",
                    f"--socket={root}/munge.socket",
                    f"--key-file={key}",
                    f"--pid-file={root}/munged.pid",
                    f"--log-file={root}/munged.log",
                    f"--seed-file={root}/munged.seed",
                ],
                stdout=daemon_output,
                stderr=subprocess.STDOUT,
            )
        )
        _wait_for(lambda: (root / "munge.socket").exists(), processes, root, start_timeout)
        processes.append(
            subprocess.Popen(
                ["slurmctld", "-D", "-i", "-f", str(conf)],
                env=env,
                stdout=daemon_output,
                stderr=subprocess.STDOUT,
            )
        )
        for name in node_ports:
            processes.append(
                subprocess.Popen(
                    ["slurmd", "-D", "-N", name, "-f", str(conf)],
                    env=env,
                    stdout=daemon_output,
                    stderr=subprocess.STDOUT,
                )
            )
        cluster = SlurmCluster(root, env)

        def all_idle() -> bool:
            states = cluster.run("sinfo", "-h", "-N", "-o", "%N %t", timeout=20).stdout.split()
            return states.count("idle") == nodes

        _wait_for(all_idle, processes, root, start_timeout)
        yield cluster
        # Steps end with their jobs; a slurmstepd whose slurmd is gone would linger.
        cluster.run("scancel", "--full", f"--user={getpass.getuser()}", timeout=20)
        deadline = time.monotonic() + 20
        while cluster.run("squeue", "-h", timeout=20).stdout.strip():
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        _stop(processes)
        daemon_output.close()


def _wait_for(
    ready: object, processes: list[subprocess.Popen[bytes]], root: Path, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while not ready():  # type: ignore[operator]
        dead = [p.args[0] for p in processes if p.poll() is not None]  # type: ignore[index]
        if dead or time.monotonic() > deadline:
            why = f"{', '.join(map(str, dead))} exited" if dead else f"not ready in {timeout:.0f} s"
            raise RuntimeError(f"local Slurm cluster did not start: {why}\n{_log_tail(root)}")
        time.sleep(0.2)
