"""``slurm``: a task of a Slurm job step, started by ``srun``.

A step is recognised by ``SLURM_STEP_ID``, which ``srun`` sets for every task it starts. An
``salloc`` shell or an ``sbatch`` script has the job's variables (``SLURM_JOB_ID``,
``SLURM_NTASKS``, even ``SLURM_PROCID=0`` in a batch script) but no step of its own, so a
``python train.py`` typed there is not mistaken for rank 0 of a step that does not exist; the
special step ids Slurm gives batch scripts, ``salloc``'s interactive step and the extern step
(above ``0xfffffff0``) are not job steps either.

Where Slurm gives a value twice, the step's own variable wins over the job's: ``srun
--preserve-env`` keeps the job's ``SLURM_NTASKS`` and ``SLURM_TASKS_PER_NODE``, while
``SLURM_STEP_NUM_TASKS``/``SLURM_STEP_TASKS_PER_NODE`` always describe the step, and a step may
run on a subset of the job's nodes, so rank 0 is on the first host of ``SLURM_STEP_NODELIST``
(with the default block distribution), not necessarily of ``SLURM_JOB_NODELIST``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..plugin import ClusterInfo, ConfigError, hookimpl
from . import _hostlist
from ._common import Reader, read_int

__all__ = ["accelbackends_cluster_environment", "is_job_step", "parse_counts", "started_by_srun"]

#: Slurm's ``SLURM_MAX_NORMAL_STEP_ID``: ids above it are the batch, interactive, extern and
#: pending "steps", which are not ``srun`` launches.
MAX_NORMAL_STEP_ID = 0xFFFFFFF0
_COUNT = re.compile(r"^([0-9]+)(?:\(x([0-9]+)\))?$", re.ASCII)
_NODELISTS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")


def parse_counts(text: str, *, source: str) -> list[int]:
    """Slurm's compressed per-node counts: ``"2(x3),1"`` is ``[2, 2, 2, 1]``."""
    counts: list[int] = []
    for item in text.strip().split(","):
        match = _COUNT.match(item.strip())
        if not match or int(match.group(1)) < 1 or (match.group(2) and int(match.group(2)) < 1):
            raise ConfigError(
                f"{source}={text!r} is not valid; use counts >= 1 per node, a repeated count "
                "written as N(xK), separated by commas (e.g. 2(x3),1)"
            )
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def is_job_step(env: Mapping[str, str]) -> bool:
    """True for a task ``srun`` started; False in ``salloc``/``sbatch`` shells and outside Slurm."""
    var = next((v for v in ("SLURM_STEP_ID", "SLURM_STEPID") if env.get(v, "").strip()), None)
    return var is not None and read_int(env, var) <= MAX_NORMAL_STEP_ID


def started_by_srun(env: Mapping[str, str], rank: int, world_size: int | None) -> bool:
    """True when ``srun`` itself started this process and also provided an MPI launcher's
    variables (``srun --mpi=pmi2`` sets ``PMI_RANK``/``PMI_SIZE``, ``--mpi=pmix`` sets
    ``PMIX_RANK``, ``--mpi=cray_shasta`` sets ``PALS_RANKID``): the step's rank and task count
    are the same numbers, and Slurm's variables say more (node list, tasks per node).

    An ``mpirun``/``mpiexec`` inside an allocation starts its per-node daemons with ``srun``,
    so its ranks inherit a *daemon* step's variables, whose ``SLURM_PROCID`` counts daemons, not
    ranks: the numbers disagree and the MPI launcher's variables are the ones to use.
    """
    try:
        if not is_job_step(env):
            return False
        step_rank = read_int(env, "SLURM_PROCID")
        tasks_var = next(
            (v for v in ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS") if env.get(v, "").strip()),
            None,
        )
        step_tasks = read_int(env, tasks_var) if tasks_var else None
    except ConfigError:
        return False
    return step_rank == rank and (world_size is None or step_tasks == world_size)


def _nodes(r: Reader, *names: str) -> tuple[int, str] | None:
    name = r.first(*names)
    return (read_int(r.env, name), name) if name else None


def _local_world_size(r: Reader, world: int, node: int) -> int:
    # Each per-node list is checked against the node count of the same scope: the step's against
    # the step's, the job's (kept by ``srun --preserve-env``) against the job's.
    list_var = r.first("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
    if list_var is not None:
        nodes = _nodes(
            r, "SLURM_STEP_NUM_NODES" if list_var == "SLURM_STEP_TASKS_PER_NODE" else "SLURM_NNODES"
        )
        counts = parse_counts(r.env[list_var], source=list_var)
        if nodes is not None and len(counts) != nodes[0]:
            raise ConfigError(
                f"{list_var}={r.env[list_var]!r} lists {len(counts)} nodes but "
                f"{nodes[1]}={nodes[0]}; the launcher's variables contradict each other"
            )
        if sum(counts) != world:
            raise ConfigError(
                f"{list_var}={r.env[list_var]!r} adds up to {sum(counts)} tasks but "
                f"{r.sources['world_size']}={world}; the launcher's variables contradict each "
                "other"
            )
        if node >= len(counts):
            raise ConfigError(
                f"SLURM_NODEID={node} must be less than the {len(counts)} nodes of "
                f"{list_var}={r.env[list_var]!r}"
            )
        return r.derive("local_world_size", counts[node], f"{list_var}[SLURM_NODEID]")
    per_node = r.read(
        "local_world_size",
        "SLURM_NTASKS_PER_NODE",
        missing="srun sets SLURM_STEP_TASKS_PER_NODE for every task it starts",
    )
    nodes = _nodes(r, "SLURM_STEP_NUM_NODES", "SLURM_NNODES")
    if nodes is not None:
        r.check_product(world, nodes[0], nodes[1], per_node, "SLURM_NTASKS_PER_NODE")
        if node >= nodes[0]:
            raise ConfigError(f"SLURM_NODEID={node} must be less than {nodes[1]}={nodes[0]}")
    return per_node


def _first_host(r: Reader) -> tuple[str, str] | None:
    list_var = r.first(*_NODELISTS)
    if list_var is None:
        return None
    return _hostlist.first_host(r.env[list_var], source=list_var), f"{list_var} (first host)"


@hookimpl
def accelbackends_cluster_environment(env: Mapping[str, str]) -> ClusterInfo | None:
    if not is_job_step(env):
        return None
    r = Reader(env, "slurm")
    rank = r.read("rank", "SLURM_PROCID")
    world = r.read("world_size", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
    local = r.read("local_rank", "SLURM_LOCALID")
    node = r.read("node_rank", "SLURM_NODEID")
    local_world = _local_world_size(r, world, node)
    r.check_counts(rank, world, local, local_world, node)
    job_var = r.first("SLURM_JOB_ID", "SLURM_JOBID")
    step_var = r.first("SLURM_STEP_ID", "SLURM_STEPID")
    job = f"{env[job_var]}.{env[step_var]}" if job_var and step_var else None
    addr, port = r.rendezvous(
        world,
        local_world,
        derive_addr=lambda: _first_host(r),
        job_id=(job, f"{job_var}.{step_var}") if job and job_var and step_var else None,
    )
    return r.cluster(
        rank=rank,
        world_size=world,
        local_rank=local,
        local_world_size=local_world,
        node_rank=node,
        master_addr=addr,
        master_port=port,
        run_id=f"slurm/{job}" if job else "",
    )
