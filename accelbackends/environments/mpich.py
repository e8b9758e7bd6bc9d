"""``mpich``: a rank started by MPICH's or Intel MPI's ``mpiexec`` (Hydra).

Hydra sets ``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID`` and ``MPI_LOCALNRANKS``. ``srun
--mpi=pmi2`` also sets ``PMI_RANK``/``PMI_SIZE`` for the tasks it starts; there the numbers
agree with the step's own and the ``slurm`` environment answers (it knows the node list). Hydra
does not say where rank 0 runs: with more than one node, set ``MASTER_ADDR``.

Hydra sets no job id either, and two jobs on one node must not meet at one port with the same
store keys. The job is identified by what is there: inside a Slurm allocation Hydra starts its
proxies as one ``srun`` step, so ``SLURM_JOB_ID.SLURM_STEP_ID`` is the same on every rank and
unique; outside Slurm, when every rank runs on this node, they all descend from one
``hydra_pmi_proxy``, whose process id (with the host name) is unique on the node while the job
runs. Across nodes without Slurm nothing identifies the job: set ``MASTER_PORT`` per job.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..plugin import ClusterInfo, hookimpl
from ._common import Reader, read_int, read_mpi_style
from .slurm import slurm_step, started_by_srun

#: The name ``hydra_pmi_proxy`` has in ``/proc/<pid>/stat`` (``comm``: 15 characters at most).
_PROXY = "hydra_pmi_proxy"
_MAX_ANCESTORS = 32


def hydra_proxy_pid(proc: Path = Path("/proc")) -> int | None:
    """The process id of the ``hydra_pmi_proxy`` this process descends from, or None.

    The rank may be a grandchild (``mpiexec sh -c 'python …'``), so the ancestors are walked.
    """
    pid = 0  # /proc/self on the first step
    for _ in range(_MAX_ANCESTORS):
        try:
            stat = (proc / (str(pid) if pid else "self") / "stat").read_text()
        except OSError:
            return None
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        head, _, tail = stat.rpartition(")")
        own_pid, _, comm = head.partition(" (")
        if comm == _PROXY:
            return int(own_pid)
        fields = tail.split()
        if len(fields) < 2 or not fields[1].isdigit() or int(fields[1]) <= 1:
            return None
        pid = int(fields[1])
    return None


def _job(env: Mapping[str, str], world: int, local_world: int) -> tuple[str, str] | None:
    if (step := slurm_step(env)) is not None:
        return step
    if world == local_world and (pid := hydra_proxy_pid()) is not None:
        import socket  # only under MPICH: detection elsewhere never needs it

        return f"{socket.gethostname()}:{pid}", f"this node's {_PROXY} (pid {pid})"
    return None


@hookimpl
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo | None:
    if "PMI_RANK" not in env:
        return None
    size = read_int(env, "PMI_SIZE", low=1) if env.get("PMI_SIZE", "").strip() else None
    if started_by_srun(env, read_int(env, "PMI_RANK"), size):
        return None
    return read_mpi_style(
        Reader(env, "mpich"),
        rank=("PMI_RANK",),
        world_size=("PMI_SIZE",),
        # PMI_LOCAL_RANK/PMI_LOCAL_SIZE: Cray PMI's names for the same numbers.
        local_rank=("MPI_LOCALRANKID", "PMI_LOCAL_RANK"),
        local_world_size=("MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"),
        missing_local="mpiexec (Hydra) sets MPI_LOCALRANKID and MPI_LOCALNRANKS; a launcher "
        "that gives only PMI_RANK cannot tell which device is this rank's",
        derive_job=lambda world, local_world: _job(env, world, local_world),
        hint=" (mpiexec -genv MASTER_ADDR <rank 0's host> passes it to every rank)",
    )
