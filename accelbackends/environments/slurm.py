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
from dataclasses import dataclass

from ..plugin import ClusterInfo, ConfigError, hookimpl
from ._common import Reader, parse_int, read_int, shown

__all__ = [
    "Counts",
    "accelbackends_cluster_environment",
    "is_job_step",
    "parse_counts",
    "reserved_port",
    "slurm_step",
    "started_by_srun",
]

#: Slurm's ``SLURM_MAX_NORMAL_STEP_ID``: ids above it are the batch, interactive, extern and
#: pending "steps", which are not ``srun`` launches.
MAX_NORMAL_STEP_ID = 0xFFFFFFF0
_COUNT = re.compile(r"^([0-9]+)(?:\(x([0-9]+)\))?$", re.ASCII)
_NODELISTS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")


@dataclass(frozen=True)
class Counts:
    """Slurm's compressed per-node counts, kept compressed: ``"2(x3),1"`` is ``(2, 3), (1, 1)``
    (count, repeat); a ``1(x10000000000)`` costs nothing until a node's count is asked for."""

    runs: tuple[tuple[int, int], ...]

    def __len__(self) -> int:
        return sum(repeat for _, repeat in self.runs)

    def total(self) -> int:
        return sum(count * repeat for count, repeat in self.runs)

    def __getitem__(self, node: int) -> int:
        for count, repeat in self.runs:
            if node < repeat:
                return count
            node -= repeat
        raise IndexError(node)

    def expand(self) -> list[int]:
        return [count for count, repeat in self.runs for _ in range(repeat)]


def parse_counts(text: str, *, source: str) -> Counts:
    """Slurm's compressed per-node counts: ``"2(x3),1"`` is 2, 2, 2, 1."""
    runs: list[tuple[int, int]] = []
    for item in text.strip().split(","):
        match = _COUNT.match(item.strip())
        if match:
            try:
                count = parse_int(match.group(1), "count")
                repeat = parse_int(match.group(2) or "1", "repeat")
            except ConfigError as exc:
                raise ConfigError(f"{source}={shown(text)}: {exc}") from None
        if not match or count < 1 or repeat < 1:
            raise ConfigError(
                f"{source}={shown(text)} is not valid; use counts >= 1 per node, a repeated "
                "count written as N(xK), separated by commas (e.g. 2(x3),1)"
            )
        runs.append((count, repeat))
    return Counts(tuple(runs))


def is_job_step(env: Mapping[str, str]) -> bool:
    """True for a task ``srun`` started; False in ``salloc``/``sbatch`` shells and outside Slurm."""
    var = next((v for v in ("SLURM_STEP_ID", "SLURM_STEPID") if env.get(v, "").strip()), None)
    # Step ids are unsigned 32-bit; the special ones sit just below 2**32.
    return var is not None and read_int(env, var, high=2**32 - 1) <= MAX_NORMAL_STEP_ID


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


def slurm_step(env: Mapping[str, str]) -> tuple[str, str] | None:
    """(``job.step``, the variables it came from) when this process runs inside a Slurm step:
    unique to the step, and the same on every node of it. An MPI launcher inside an allocation
    starts its daemons as one step, so its ranks share this too."""
    job_var = next((v for v in ("SLURM_JOB_ID", "SLURM_JOBID") if env.get(v, "").strip()), None)
    step_var = next((v for v in ("SLURM_STEP_ID", "SLURM_STEPID") if env.get(v, "").strip()), None)
    if job_var and step_var:
        return f"{env[job_var].strip()}.{env[step_var].strip()}", f"{job_var}.{step_var}"
    return None


def reserved_port(env: Mapping[str, str]) -> tuple[int, str] | None:
    """The first of the ports ``srun --resv-ports`` reserved for this step on every node of it
    (``SLURM_STEP_RESV_PORTS=12000-12003``): no other step is given it while this one runs."""
    value = env.get("SLURM_STEP_RESV_PORTS", "").strip()
    if not value:
        return None
    first = value.split(",")[0].split("-")[0]
    port = parse_int(first, "SLURM_STEP_RESV_PORTS")
    if not 0 < port < 65536:
        raise ConfigError(
            f"SLURM_STEP_RESV_PORTS={shown(value)} does not start with a TCP port; Slurm writes "
            "a port range such as 12000-12003"
        )
    return port, "SLURM_STEP_RESV_PORTS (first reserved port)"


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
                f"{list_var}={shown(r.env[list_var])} lists {len(counts)} nodes but "
                f"{nodes[1]}={nodes[0]}; the launcher's variables contradict each other"
            )
        if counts.total() != world:
            raise ConfigError(
                f"{list_var}={shown(r.env[list_var])} adds up to {counts.total()} tasks but "
                f"{r.sources['world_size']}={world}; the launcher's variables contradict each "
                "other"
            )
        if node >= len(counts):
            raise ConfigError(
                f"SLURM_NODEID={node} must be less than the {len(counts)} nodes of "
                f"{list_var}={shown(r.env[list_var])}"
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
    from . import _hostlist  # only to name rank 0's host from a node list

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
    step = slurm_step(env)
    if step is not None:
        r.sources["run_id"] = step[1]
    addr, port = r.rendezvous(
        world,
        local_world,
        derive_addr=lambda: _first_host(r),
        derive_port=lambda: reserved_port(env),
        job_id=step,
    )
    return r.cluster(
        rank=rank,
        world_size=world,
        local_rank=local,
        local_world_size=local_world,
        node_rank=node,
        master_addr=addr,
        master_port=port,
        run_id=f"slurm/{step[0]}" if step else "",
    )
