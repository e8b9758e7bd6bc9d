"""``openmpi``: a rank started by Open MPI's ``mpirun``/``mpiexec`` (``orterun``, ``prterun``).

``mpirun`` sets ``OMPI_COMM_WORLD_RANK``, ``_SIZE``, ``_LOCAL_RANK`` and ``_LOCAL_SIZE`` before
the program starts (``srun`` never does: a rank that ``srun`` starts directly learns them only
inside ``MPI_Init``), so they identify ``mpirun`` as this process's launcher even inside a Slurm
allocation, where ``mpirun`` starts its daemons with ``srun`` and every rank inherits a daemon
step's ``SLURM_*`` variables. ``OMPI_COMM_WORLD_NODE_RANK`` is a rank among the processes on the
node, not the node's index, so the node rank is derived from the packed mapping ``mpirun`` uses
by default (a round-robin placement is detected and refused). Open MPI does not say where rank 0
runs: with more than one node, set ``MASTER_ADDR``; the port is derived from the job's
``PMIX_NAMESPACE``.

Two managed services run their multi-node jobs with ``mpirun`` and say where rank 0 is:
AzureML's ``AZ_BATCH_MASTER_NODE`` (``host:port``, jobs of several nodes) and
``AZ_BATCHAI_MPI_MASTER_NODE`` (a host), and SageMaker's ``SM_HOSTS`` (a JSON list of its
``algo-N`` hosts; its MPI runner starts rank 0 on the first in sorted order).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..plugin import ClusterInfo, ConfigError, hookimpl
from ._common import Reader, parse_int, read_mpi_style, shown

_AZURE_NODE = "AZ_BATCH_MASTER_NODE"
_AZURE_MPI_NODE = "AZ_BATCHAI_MPI_MASTER_NODE"
_SAGEMAKER_HOSTS = "SM_HOSTS"


def managed_master(env: Mapping[str, str]) -> tuple[str, str] | None:
    """Rank 0's host as AzureML or SageMaker names it, or None outside those services."""
    if value := env.get(_AZURE_NODE, "").strip():
        return value.rpartition(":")[0] or value, f"{_AZURE_NODE} (host)"
    if value := env.get(_AZURE_MPI_NODE, "").strip():
        return value, _AZURE_MPI_NODE
    if value := env.get(_SAGEMAKER_HOSTS, "").strip():
        try:
            hosts = json.loads(value)
        except ValueError:
            hosts = None
        if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) for h in hosts):
            raise ConfigError(
                f"{_SAGEMAKER_HOSTS}={shown(value)} is not valid; SageMaker writes a JSON list of "
                'host names such as ["algo-1", "algo-2"]; or set MASTER_ADDR'
            )
        return sorted(hosts)[0], f"{_SAGEMAKER_HOSTS} (first host, sorted)"
    return None


def managed_port(env: Mapping[str, str]) -> tuple[int, str] | None:
    """The port of AzureML's ``AZ_BATCH_MASTER_NODE=host:port``, where it names one."""
    host, _, port = env.get(_AZURE_NODE, "").strip().rpartition(":")
    if not host or not port:
        return None
    value = parse_int(port, _AZURE_NODE)
    if not 0 < value < 65536:
        raise ConfigError(f"{_AZURE_NODE}={shown(env[_AZURE_NODE])} has no TCP port after ':'")
    return value, f"{_AZURE_NODE} (port)"


@hookimpl
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo | None:
    if "OMPI_COMM_WORLD_RANK" not in env and "OMPI_COMM_WORLD_SIZE" not in env:
        return None
    return read_mpi_style(
        Reader(env, "openmpi"),
        rank=("OMPI_COMM_WORLD_RANK",),
        world_size=("OMPI_COMM_WORLD_SIZE",),
        local_rank=("OMPI_COMM_WORLD_LOCAL_RANK",),
        local_world_size=("OMPI_COMM_WORLD_LOCAL_SIZE",),
        job_id="PMIX_NAMESPACE",
        derive_addr=lambda: managed_master(env),
        derive_port=lambda: managed_port(env),
        hint=" (mpirun -x MASTER_ADDR=<rank 0's host> passes it to every rank)",
    )
