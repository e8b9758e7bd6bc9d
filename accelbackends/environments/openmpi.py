"""``openmpi``: a rank started by Open MPI's ``mpirun``/``mpiexec`` (``orterun``, ``prterun``).

``mpirun`` sets ``OMPI_COMM_WORLD_RANK``, ``_SIZE``, ``_LOCAL_RANK`` and ``_LOCAL_SIZE`` before
the program starts (``srun`` never does: a rank that ``srun`` starts directly learns them only
inside ``MPI_Init``), so they identify ``mpirun`` as this process's launcher even inside a Slurm
allocation, where ``mpirun`` starts its daemons with ``srun`` and every rank inherits a daemon
step's ``SLURM_*`` variables. ``OMPI_COMM_WORLD_NODE_RANK`` is a rank among the processes on the
node, not the node's index, so the node rank is derived from the packed mapping ``mpirun`` uses
by default. Open MPI does not say where rank 0 runs: with more than one node, set
``MASTER_ADDR``; the port is derived from the job's ``PMIX_NAMESPACE``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plugin import ClusterInfo, hookimpl
from ._common import Reader, read_mpi_style


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
        hint=" (mpirun -x MASTER_ADDR=<rank 0's host> passes it to every rank)",
    )
