"""``lsf``: a rank started by ``jsrun`` (IBM Job Step Manager) in an LSF job.

``jsrun`` sets ``JSM_NAMESPACE_RANK``, ``_SIZE``, ``_LOCAL_RANK`` and ``_LOCAL_SIZE``. It also
sets Open MPI's ``OMPI_COMM_WORLD_*`` for Spectrum MPI, so this environment is asked before
``openmpi``: the ``JSM_*`` variables exist only when ``jsrun`` started the process. Rank 0 runs
on the job's first compute host, the second line of LSF's rank file ``LSB_DJOB_RANKFILE`` (its
first line is the launch node, which runs no ranks under ``jsrun``); the port is derived from
``LSB_JOBID``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plugin import ClusterInfo, ConfigError, hookimpl
from ._common import Reader, read_mpi_style

_RANKFILE = "LSB_DJOB_RANKFILE"


def first_compute_host(env: Mapping[str, str]) -> tuple[str, str] | None:
    """The first host after the launch node in ``LSB_DJOB_RANKFILE``, or None without one."""
    path = env.get(_RANKFILE, "").strip()
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as rankfile:
            hosts = [line.strip() for line in rankfile if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{_RANKFILE}={path!r} cannot be read ({exc.__class__.__name__}: {exc}); LSF "
            "writes it for every job, or set MASTER_ADDR to rank 0's host"
        ) from None
    if len(hosts) < 2:
        raise ConfigError(
            f"{_RANKFILE}={path!r} lists {len(hosts)} host(s); a jsrun job's rank file lists "
            "the launch node, then the compute hosts; set MASTER_ADDR to rank 0's host"
        )
    return hosts[1], f"{_RANKFILE} (first compute host)"


@hookimpl
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo | None:
    if "JSM_NAMESPACE_RANK" not in env and "JSM_NAMESPACE_SIZE" not in env:
        return None
    return read_mpi_style(
        Reader(env, "lsf"),
        rank=("JSM_NAMESPACE_RANK",),
        world_size=("JSM_NAMESPACE_SIZE",),
        local_rank=("JSM_NAMESPACE_LOCAL_RANK",),
        local_world_size=("JSM_NAMESPACE_LOCAL_SIZE",),
        job_id="LSB_JOBID",
        derive_addr=lambda: first_compute_host(env),
        hint=f" ({_RANKFILE} names the hosts when LSF sets it)",
    )
