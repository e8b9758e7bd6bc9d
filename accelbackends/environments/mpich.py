"""``mpich``: a rank started by MPICH's or Intel MPI's ``mpiexec`` (Hydra).

Hydra sets ``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID`` and ``MPI_LOCALNRANKS``. ``srun
--mpi=pmi2`` also sets ``PMI_RANK``/``PMI_SIZE`` for the tasks it starts; there the numbers
agree with the step's own and the ``slurm`` environment answers (it knows the node list). Hydra
does not say where rank 0 runs: with more than one node, set ``MASTER_ADDR``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plugin import ClusterInfo, hookimpl
from ._common import Reader, read_int, read_mpi_style
from .slurm import started_by_srun


@hookimpl
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo | None:
    if "PMI_RANK" not in env:
        return None
    size = read_int(env, "PMI_SIZE") if env.get("PMI_SIZE", "").strip() else None
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
        hint=" (mpiexec -genv MASTER_ADDR <rank 0's host> passes it to every rank)",
    )
