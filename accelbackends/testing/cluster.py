"""Fake launchers: the environment variables a launcher gives one rank, for ``Registry(env=...)``.

A test of cluster-aware code needs the variables ``torchrun``, ``srun`` or ``mpirun`` would set,
for one rank of a job of a given shape, without running the launcher:

```python
env = launcher_env("slurm", rank=5, world_size=8, local_world_size=4)
cluster = accelbackends.Registry(env=env).cluster_environment()
assert (cluster.launcher, cluster.node_rank, cluster.local_rank) == ("slurm", 1, 1)
```

`clean_environment` removes such variables (and every ``ACCELBACKENDS_*`` one but the probe
root) from a mapping, so that a test does not see the shell it was started from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..environments.variables import LAUNCHER_PREFIXES, LAUNCHER_VARIABLES, env_variables
from ..plugin.config import PROBE_ROOT

__all__ = [
    "LAUNCHERS",
    "LAUNCHER_PREFIXES",
    "LAUNCHER_VARIABLES",
    "clean_environment",
    "is_launcher_variable",
    "launcher_env",
]


def is_launcher_variable(key: str) -> bool:
    """Does ``key`` make a process look launched (or configure accelbackends)? Not the machine's
    settings: ``ACCELBACKENDS_PROBE_ROOT`` (which machine the test set up: a hermetic suite's
    tree without accelerators) and Open MPI's ``OMPI_MCA_*`` parameters (how MPI runs here)."""
    if key == PROBE_ROOT or key.startswith("OMPI_MCA_"):
        return False
    return key.startswith(LAUNCHER_PREFIXES) or key in LAUNCHER_VARIABLES


def clean_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without launcher variables and ``ACCELBACKENDS_*`` variables (see
    `is_launcher_variable`); children keep the machine's settings."""
    return {key: value for key, value in env.items() if not is_launcher_variable(key)}


def _torchrun(job: _Job) -> dict[str, str]:
    return {
        "TORCHELASTIC_RUN_ID": job.job_id,
        **job.env_variables(),
        "GROUP_RANK": str(job.node_rank),
        "MASTER_ADDR": job.master_addr or "127.0.0.1",
        "MASTER_PORT": str(job.master_port),
    }


def _env(job: _Job) -> dict[str, str]:
    return {**job.env_variables(), **job.rendezvous()}


def _slurm(job: _Job) -> dict[str, str]:
    nodes = job.world_size // job.local_world_size
    hosts = "node001" if nodes == 1 else f"node[001-{nodes:03d}]"
    per_node = str(job.local_world_size) + (f"(x{nodes})" if nodes > 1 else "")
    return {
        "SLURM_JOB_ID": job.job_id,
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": str(job.rank),
        "SLURM_NTASKS": str(job.world_size),
        "SLURM_STEP_NUM_TASKS": str(job.world_size),
        "SLURM_LOCALID": str(job.local_rank),
        "SLURM_NODEID": str(job.node_rank),
        "SLURM_STEP_NUM_NODES": str(nodes),
        "SLURM_STEP_TASKS_PER_NODE": per_node,
        "SLURM_STEP_NODELIST": hosts,
        **job.rendezvous(),
    }


def _openmpi(job: _Job) -> dict[str, str]:
    return {
        "OMPI_COMM_WORLD_RANK": str(job.rank),
        "OMPI_COMM_WORLD_SIZE": str(job.world_size),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(job.local_rank),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(job.local_world_size),
        "PMIX_NAMESPACE": f"prterun-{job.job_id}",
        **job.rendezvous(),
    }


def _mpich(job: _Job) -> dict[str, str]:
    return {
        "PMI_RANK": str(job.rank),
        "PMI_SIZE": str(job.world_size),
        "MPI_LOCALRANKID": str(job.local_rank),
        "MPI_LOCALNRANKS": str(job.local_world_size),
        **job.rendezvous(),
    }


class _Job:
    def __init__(
        self,
        rank: int,
        world_size: int,
        local_world_size: int,
        master_addr: str | None,
        master_port: int | None,
        job_id: str,
    ) -> None:
        for name, value, low in (
            ("rank", rank, 0),
            ("world_size", world_size, 1),
            ("local_world_size", local_world_size, 1),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name}={value!r} is not valid; use an integer >= {low}")
        if rank >= world_size:
            raise ValueError(f"rank={rank} must be less than world_size={world_size}")
        if world_size % local_world_size:
            raise ValueError(
                f"world_size={world_size} is not a multiple of local_world_size="
                f"{local_world_size}; a fake job has the same number of ranks on every node"
            )
        if master_port is not None and not 0 < master_port < 65536:
            raise ValueError(f"master_port={master_port!r} is not a TCP port; use 1 to 65535")
        self.rank = rank
        self.world_size = world_size
        self.local_world_size = local_world_size
        self.local_rank = rank % local_world_size
        self.node_rank = rank // local_world_size
        self.master_addr = master_addr
        self.master_port = 29500 if master_port is None else master_port
        self.job_id = job_id

    def env_variables(self) -> dict[str, str]:
        return env_variables(self.rank, self.world_size, self.local_rank, self.local_world_size)

    def rendezvous(self) -> dict[str, str]:
        """``MASTER_ADDR``/``MASTER_PORT`` where the caller gave an address (a user-set one)."""
        if self.master_addr is None:
            return {}
        return {"MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port)}


_LAUNCHERS: dict[str, Callable[[_Job], dict[str, str]]] = {
    "torchrun": _torchrun,
    "env": _env,
    "slurm": _slurm,
    "openmpi": _openmpi,
    "mpich": _mpich,
}
#: The launchers `launcher_env` can imitate.
LAUNCHERS: tuple[str, ...] = tuple(_LAUNCHERS)


def launcher_env(
    launcher: str = "torchrun",
    *,
    rank: int = 0,
    world_size: int = 1,
    local_world_size: int | None = None,
    master_addr: str | None = "127.0.0.1",
    master_port: int | None = None,
    job_id: str = "4242",
) -> dict[str, str]:
    """The variables ``launcher`` sets for ``rank`` of a job of ``world_size`` ranks.

    Ranks are packed node by node, ``local_world_size`` per node (all on one node by default),
    as every launcher does by default: local rank and node rank follow from ``rank``.

    Args:
        launcher: One of `LAUNCHERS`: ``torchrun``, ``env`` (plain ``env://``
            variables), ``slurm`` (a task ``srun`` started), ``openmpi`` or ``mpich`` (Hydra).
        master_addr: Set ``MASTER_ADDR``/``MASTER_PORT`` as a user would; None leaves them
            out, so the launcher's own derivation is exercised (``torchrun`` always sets them).
        master_port: The port with ``master_addr``; 29500 by default.
        job_id: The job's id where the launcher has one (``SLURM_JOB_ID``, ...).
    """
    make = _LAUNCHERS.get(launcher)
    if make is None:
        raise ValueError(f"launcher={launcher!r} is not known; use one of {', '.join(LAUNCHERS)}")
    job = _Job(
        rank,
        world_size,
        world_size if local_world_size is None else local_world_size,
        master_addr,
        master_port,
        job_id,
    )
    return make(job)
