"""``mvapich``: a rank started by MVAPICH2's ``mpirun_rsh`` (or its ``mpiexec``).

MVAPICH2 sets ``MV2_COMM_WORLD_RANK``, ``_SIZE``, ``_LOCAL_RANK`` and ``_LOCAL_SIZE`` before the
program starts, in the same shape as Open MPI's ``OMPI_COMM_WORLD_*``. Its ``mpiexec`` is Hydra
and sets ``PMI_RANK`` too; this environment is asked before ``mpich`` so that the launcher is
named. ``srun`` never sets the ``MV2_*`` variables, so they identify an MVAPICH2 launcher inside an
allocation too. MVAPICH2 does not say where rank 0 runs: with more than one node, set
``MASTER_ADDR``; inside Slurm the job's step identifies the job.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plugin import ClusterInfo, hookimpl
from ._common import Reader, read_mpi_style
from .slurm import slurm_step


@hookimpl
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo | None:
    if "MV2_COMM_WORLD_RANK" not in env and "MV2_COMM_WORLD_SIZE" not in env:
        return None
    return read_mpi_style(
        Reader(env, "mvapich"),
        rank=("MV2_COMM_WORLD_RANK",),
        world_size=("MV2_COMM_WORLD_SIZE",),
        local_rank=("MV2_COMM_WORLD_LOCAL_RANK",),
        local_world_size=("MV2_COMM_WORLD_LOCAL_SIZE",),
        derive_job=lambda world, local_world: slurm_step(env),
        hint=" (mpirun_rsh passes VAR=value arguments before the program to every rank: "
        "mpirun_rsh -np N -hostfile hosts MASTER_ADDR=<rank 0's host> python train.py)",
    )
