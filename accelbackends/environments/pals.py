"""``pals``: a rank started by HPE Cray PALS (``mpiexec``/``aprun`` on Cray EX systems under PBS).

PALS sets ``PALS_RANKID``, ``PALS_NODEID``, ``PALS_LOCAL_RANKID``, ``PALS_LOCAL_SIZE`` and
``PALS_APID``; the world size comes from Cray PMI's ``PMI_SIZE``. ``srun --mpi=cray_shasta``
sets ``PALS_RANKID`` too (the ``slurm`` environment answers there, see
`started_by_srun`), and where ``PMI_RANK`` differs from
``PALS_RANKID`` an MPI launcher started by PALS (Hydra's proxies) started this process, and the
``mpich`` environment answers. PALS does not say where rank 0 runs: with more than one node, set
``MASTER_ADDR`` (under PBS, the first line of ``$PBS_NODEFILE``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plugin import ClusterInfo, hookimpl
from ._common import Reader, read_int, read_mpi_style
from .slurm import started_by_srun


@hookimpl
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo | None:
    if "PALS_RANKID" not in env:
        return None
    rank = read_int(env, "PALS_RANKID")
    if env.get("PMI_RANK", "").strip() and read_int(env, "PMI_RANK") != rank:
        return None
    size = read_int(env, "PMI_SIZE", low=1) if env.get("PMI_SIZE", "").strip() else None
    if started_by_srun(env, rank, size):
        return None
    return read_mpi_style(
        Reader(env, "pals"),
        rank=("PALS_RANKID",),
        world_size=("PMI_SIZE", "WORLD_SIZE"),
        local_rank=("PALS_LOCAL_RANKID", "PMI_LOCAL_RANK"),
        local_world_size=("PALS_LOCAL_SIZE", "PMI_LOCAL_SIZE"),
        node_rank=("PALS_NODEID",),
        missing_world="Cray PMI sets PMI_SIZE; without it pass the number of ranks as "
        "WORLD_SIZE (mpiexec --env WORLD_SIZE=<ranks>)",
        missing_local="PALS sets PALS_LOCAL_RANKID and PALS_LOCAL_SIZE when it starts the ranks",
        job_id="PALS_APID",
        hint=" (under PBS: export MASTER_ADDR=$(head -n 1 $PBS_NODEFILE) before mpiexec)",
    )
