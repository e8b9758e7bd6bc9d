"""The launchers' variables as data: which ones make a process look started by a launcher, and
the ``env://`` variables that describe one rank's place in a job.

Not a plugin: ``info`` lists the variables it finds with these names, the testing kit removes
them from a test's environment, and ``init()``/``spawn()`` write a job's ``env://`` variables
with `env_variables`. Kept beside the launcher plugins, which read the same names.
"""

from __future__ import annotations

from ..plugin import config

__all__ = ["LAUNCHER_PREFIXES", "LAUNCHER_VARIABLES", "env_variables"]

#: Prefixes of variables that make a process look started by a launcher, or that configure
#: accelbackends itself.
LAUNCHER_PREFIXES: tuple[str, ...] = (
    config.PREFIX,
    "TORCHELASTIC_",
    "SLURM_",
    "OMPI_",
    "PMI_",
    "PMIX_",
    "PALS_",
    "JSM_",
    "LSB_",
    "PET_",
    "MV2_",
    "SKYPILOT_",
    # Ray's own (RAY_RAYLET_PID, RAY_JOB_ID) mark a Ray worker; RAY_ADDRESS would send a test's
    # local Ray to the developer's cluster.
    "RAY_",
)
#: Launcher variables without a launcher-specific prefix.
LAUNCHER_VARIABLES: tuple[str, ...] = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    # DeepSpeed's launcher's per-node variables.
    "LOCAL_SIZE",
    "CROSS_RANK",
    "CROSS_SIZE",
    # Where the openmpi plugin finds rank 0's host on AzureML and SageMaker.
    "AZ_BATCH_MASTER_NODE",
    "AZ_BATCHAI_MPI_MASTER_NODE",
    "SM_HOSTS",
)


def env_variables(
    rank: int, world_size: int, local_rank: int, local_world_size: int
) -> dict[str, str]:
    """The ``env://`` variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``LOCAL_WORLD_SIZE``) of one rank, as torchrun sets them and the ``env`` environment reads
    them."""
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(local_world_size),
    }
