"""``pmix``: a rank started by a PMIx launcher (``prterun``/``prun``, or one this package does not
know by name) that is not one of the launchers recognised before it.

A PMIx server puts only ``PMIX_RANK`` and ``PMIX_NAMESPACE`` in a rank's environment; the sizes
live behind the PMIx API, which this package does not load. So ``WORLD_SIZE`` and, with more
than one rank, ``LOCAL_WORLD_SIZE`` (``1`` for one rank per node; otherwise ``LOCAL_RANK`` too)
must be passed along, e.g. ``prterun -x WORLD_SIZE=8 -x LOCAL_WORLD_SIZE=1 ...``. ``srun
--mpi=pmix`` sets ``PMIX_RANK`` too; there the ``slurm`` environment answers, and Open MPI's
``mpirun`` (which sets ``PMIX_RANK`` as well) is recognised as ``openmpi`` first.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plugin import ClusterInfo, hookimpl
from ._common import Reader, read_int, read_mpi_style
from .slurm import started_by_srun

_PASS_ALONG = "or start the ranks with srun, mpirun or torchrun, which set everything"


@hookimpl
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo | None:
    if "PMIX_RANK" not in env:
        return None
    size = read_int(env, "WORLD_SIZE", low=1) if env.get("WORLD_SIZE", "").strip() else None
    if started_by_srun(env, read_int(env, "PMIX_RANK"), size):
        return None
    return read_mpi_style(
        Reader(env, "pmix"),
        rank=("PMIX_RANK",),
        world_size=("WORLD_SIZE",),
        local_rank=("LOCAL_RANK",),
        local_world_size=("LOCAL_WORLD_SIZE",),
        node_rank=("NODE_RANK", "GROUP_RANK"),
        missing_world="a PMIx launcher gives each rank only PMIX_RANK; pass the number of ranks "
        f"as WORLD_SIZE (prterun -x WORLD_SIZE=<ranks>) {_PASS_ALONG}",
        missing_local="a PMIx launcher does not say which ranks share a node; with one rank per "
        "node pass LOCAL_WORLD_SIZE=1 (prterun --map-by ppr:1:node -x LOCAL_WORLD_SIZE=1), with "
        f"more set LOCAL_RANK and LOCAL_WORLD_SIZE per rank in a wrapper script, {_PASS_ALONG}",
        job_id="PMIX_NAMESPACE",
    )
