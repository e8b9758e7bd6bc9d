"""``lsf``: a rank started by ``jsrun`` (IBM Job Step Manager) in an LSF job.

``jsrun`` sets ``JSM_NAMESPACE_RANK``, ``_SIZE``, ``_LOCAL_RANK`` and ``_LOCAL_SIZE``. It also
sets Open MPI's ``OMPI_COMM_WORLD_*`` for Spectrum MPI, so this environment is asked before
``openmpi``: the ``JSM_*`` variables exist only when ``jsrun`` started the process. Rank 0 runs
on the job's first compute host, the second line of LSF's rank file ``LSB_DJOB_RANKFILE`` (its
first line is the launch node, which runs no ranks under ``jsrun``); the port is derived from
``LSB_JOBID``. The rank file also gives the real placement: this node's rank is the position of
this host among the distinct compute hosts it lists, whatever order ``jsrun`` placed the ranks
in; without a rank file (or with this host missing from it) ranks are taken to be packed node by
node.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plugin import ClusterInfo, ConfigError, hookimpl
from ._common import Reader, read_mpi_style

_RANKFILE = "LSB_DJOB_RANKFILE"


def _compute_hosts(env: Mapping[str, str]) -> list[str] | None:
    """The hosts of ``LSB_DJOB_RANKFILE`` after the launch node, or None without one."""
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
    return hosts[1:]


def first_compute_host(env: Mapping[str, str]) -> tuple[str, str] | None:
    """The first host after the launch node in ``LSB_DJOB_RANKFILE``, or None without one."""
    hosts = _compute_hosts(env)
    return (hosts[0], f"{_RANKFILE} (first compute host)") if hosts else None


def node_index(env: Mapping[str, str], hostname: str | None = None) -> tuple[int, str] | None:
    """This host's position among the distinct compute hosts of ``LSB_DJOB_RANKFILE``."""
    hosts = _compute_hosts(env)
    if not hosts:
        return None
    name = hostname
    if not name:
        import socket  # only under LSF: detection elsewhere never needs it

        name = socket.gethostname()
    distinct = list(dict.fromkeys(hosts))
    if name in distinct:
        return distinct.index(name), f"{_RANKFILE} (this host's place, {name})"
    # The file and the host may disagree on the domain part (a01n02 / a01n02.cluster).
    short = [host.split(".")[0] for host in distinct]
    if name.split(".")[0] in short:
        index = short.index(name.split(".")[0])
        return index, f"{_RANKFILE} (this host's place, {distinct[index]})"
    return None


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
        derive_node=lambda: node_index(env),
        hint=f" ({_RANKFILE} names the hosts when LSF sets it)",
    )
