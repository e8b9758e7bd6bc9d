"""Never a world smaller than the job: the recognised world compared with every other signal.

One cluster environment answers for the process (`accelbackends.environments`), but a process
usually carries the variables of more than one launcher or scheduler: an ``sbatch`` script that
forgot ``srun`` still has Slurm's allocation (``SLURM_NTASKS=4``), a ``python train.py`` on a
SkyPilot node has ``SKYPILOT_NUM_NODES=2``, a ``torchrun --standalone`` started on every node
by ``srun`` or a Kubeflow pod has the step's or the pod's node count. Each of those would run as a
job of its own, train alone and exit 0. This module lists every such signal (`Signal`) and
compares it with the recognised world; the first contradiction is a `ConfigError` naming both
sides and the fix. `accelbackends.init` and ``accelbackends info`` give the same verdict.

The rules:

1. **A world of 1** where any signal says the job has more processes or nodes is an error.
2. **torchrun agents**: a torchrun whose job spans fewer agents (``GROUP_WORLD_SIZE``) than the
   scheduler started copies of it (Slurm step tasks, allocation nodes, SkyPilot nodes,
   ``PET_NNODES``, an MPI size) is an error: each copy would be a job of its own.
3. **Per node**: fewer ranks on this node than the scheduler reserved for it
   (``SKYPILOT_NUM_GPUS_PER_NODE``, ``PET_NPROC_PER_NODE``) is an error; so are GPUs SkyPilot
   reserved beside a CPU selection (the task would hold devices it never uses), more ranks than
   the selected accelerator has devices where Kubeflow's ``numProcPerNode`` decided the count
   (it counts CPUs unless a resource name contains "gpu": an Ascend or Gaudi pod gets one
   process per CPU), and a one-process pod with ``PET_NPROC_PER_NODE=auto`` that sees several
   devices.
4. **The ``env://`` variables** (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``)
   set beside a launcher that says otherwise are an error: a framework reading them would train
   another job.

Rules 1 to 3 stand down where a smaller world is meant: ``ACCELBACKENDS_STANDALONE=1`` or
``init(standalone=True)`` (a one-process preprocessing step inside a big allocation, one
independent torchrun per node). Under Ray Train the outer launchers' variables describe the Ray
cluster's daemons, not the training job, so only rule 4 applies there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..environments.slurm import is_job_step
from ..plugin import config
from ..plugin.config import parse_int, shown
from ..plugin.errors import ConfigError
from ..plugin.types import AcceleratorStatus, ClusterInfo

__all__ = ["Signal", "Verdict", "check", "check_devices", "signals", "standalone"]

_STANDALONE_HINT = (
    f"if a smaller world is what you mean, set {config.STANDALONE}=1 "
    "(or pass init(standalone=True))"
)
#: Launchers that place their workers with a scheduler of their own: the variables of a
#: launcher around them describe that scheduler's daemons, not the job.
_OWN_SCHEDULER = frozenset({"ray"})
#: The env:// variables a framework reads to learn its place in the job, and the field each names.
_JOB_VARIABLES = {
    "RANK": "rank",
    "WORLD_SIZE": "world_size",
    "LOCAL_RANK": "local_rank",
    "LOCAL_WORLD_SIZE": "local_world_size",
}


@dataclass(frozen=True)
class Signal:
    """What one launcher or scheduler in the process says about the job's size.

    Attributes:
        scheduler: Who says it, as a user knows it (``"a Slurm allocation with no srun step"``).
        variables: The variables and values it said it with (``"SLURM_NTASKS=4"``).
        processes: The number of processes the job has by this signal, where it says.
        copies: How many copies of this process's command it started (or, for an allocation,
            nodes it reserved): what a per-node launcher such as torchrun must span.
        per_node: The processes it reserved room for on each node, where it says.
        fix: How to launch so that the world is the job.
        copies_said: How it came to `copies`, for the message (``{n}`` is the number).
    """

    scheduler: str
    variables: str
    processes: int | None = None
    copies: int | None = None
    per_node: int | None = None
    fix: str = ""
    copies_said: str = "started {n} copies of it"


@dataclass(frozen=True)
class Verdict:
    """The recognised world against every signal: what ``info`` shows and ``init`` enforces.

    Attributes:
        signals: Every signal found besides the recognised launcher's own variables.
        problem: The first contradiction, as the error's message; None when all agree.
        standalone: A smaller world was declared meant (`ACCELBACKENDS_STANDALONE`).
        skipped: Why the outer signals were not compared ("" when they were).
    """

    signals: tuple[Signal, ...] = ()
    problem: str | None = None
    standalone: bool = False
    skipped: str = ""

    def raise_for_problem(self) -> None:
        if self.problem is not None:
            raise ConfigError(self.problem)


def standalone(argument: bool | None, env: Mapping[str, str]) -> bool:
    """``init(standalone=...)`` if given, else ``ACCELBACKENDS_STANDALONE``."""
    if argument is not None:
        if not isinstance(argument, bool):
            raise ConfigError(f"standalone={argument!r} is not valid; use True or False")
        return argument
    return config.read_bool(env, config.STANDALONE)


def _int(env: Mapping[str, str], *names: str) -> tuple[int, str] | None:
    """The first of ``names`` that is set, as (value, "NAME=value")."""
    for name in names:
        value = env.get(name, "").strip()
        if value:
            number = parse_int(value, name)
            return number, f"{name}={number}"
    return None


def _joined(*found: tuple[int, str] | None) -> str:
    return ", ".join(item[1] for item in found if item is not None)


def _slurm(env: Mapping[str, str], launcher: str) -> Signal | None:
    if not any(env.get(v, "").strip() for v in ("SLURM_JOB_ID", "SLURM_JOBID")):
        return None
    if is_job_step(env):
        if launcher == "slurm":
            return None  # srun's own variables: the recognised world itself
        tasks = _int(env, "SLURM_STEP_NUM_TASKS")
        nodes = _int(env, "SLURM_STEP_NUM_NODES")
        if tasks is None and nodes is None:
            return None
        return Signal(
            "the srun step that started this process",
            _joined(tasks, nodes),
            processes=tasks[0] if tasks else None,
            copies=tasks[0] if tasks else None,
            fix="let srun start the ranks themselves (`srun -n <ranks> python train.py`; "
            "accelbackends reads srun's variables), or start one torchrun per node with "
            "`torchrun --nnodes $SLURM_STEP_NUM_NODES --rdzv-backend c10d --rdzv-endpoint "
            "<first node>:29500`",
        )
    tasks = _int(env, "SLURM_NTASKS", "SLURM_NPROCS")
    nodes = _int(env, "SLURM_JOB_NUM_NODES", "SLURM_NNODES")
    if tasks is None and nodes is None:
        return None
    return Signal(
        "a Slurm allocation with no srun step (an sbatch script or salloc shell)",
        _joined(tasks, nodes),
        processes=max(tasks[0] if tasks else 1, nodes[0] if nodes else 1),
        copies=nodes[0] if nodes else None,
        copies_said="allocated {n} nodes for it",
        fix="launch with srun: `srun python train.py` in the batch script starts every task "
        "of the allocation (or `srun --ntasks-per-node=1 torchrun --nnodes "
        "$SLURM_JOB_NUM_NODES ...` for torchrun)",
    )


def _skypilot(env: Mapping[str, str]) -> Signal | None:
    # Only the run command has SKYPILOT_NODE_RANK; setup commands get SKYPILOT_SETUP_NODE_RANK
    # and may well be one process on purpose.
    if not env.get("SKYPILOT_NODE_RANK", "").strip():
        return None
    nodes = _int(env, "SKYPILOT_NUM_NODES")
    gpus = _int(env, "SKYPILOT_NUM_GPUS_PER_NODE")
    if nodes is None:
        return None
    return Signal(
        "SkyPilot's run command",
        _joined(nodes, gpus),
        processes=nodes[0] * max(1, gpus[0] if gpus else 1),
        copies=nodes[0],
        per_node=gpus[0] if gpus and gpus[0] > 0 else None,
        fix=_SKYPILOT_TORCHRUN
        if gpus and gpus[0] > 1
        else "run `python train.py` on each node (accelbackends reads SKYPILOT_*), or with "
        f"several accelerators per node {_SKYPILOT_TORCHRUN}",
    )


# With several GPUs per node `python train.py` (one process per node) is what failed; only a
# per-node launcher uses them all.
_SKYPILOT_TORCHRUN = (
    "make the run command `torchrun --nnodes $SKYPILOT_NUM_NODES --node-rank "
    "$SKYPILOT_NODE_RANK --nproc-per-node $SKYPILOT_NUM_GPUS_PER_NODE --master-addr "
    '$(echo "$SKYPILOT_NODE_IPS" | head -n1) --master-port 29500 train.py`'
)


def _kubeflow(env: Mapping[str, str]) -> Signal | None:
    nnodes_text = env.get("PET_NNODES", "").strip()
    nproc_text = env.get("PET_NPROC_PER_NODE", "").strip()
    if not nnodes_text and not nproc_text:
        return None
    found: list[str] = []
    nodes = None
    if nnodes_text:
        # An elastic range "2:4" needs at least its minimum.
        nodes = parse_int(nnodes_text.partition(":")[0], "PET_NNODES")
        found.append(f"PET_NNODES={nnodes_text}")
    per_node = None
    if nproc_text:
        found.append(f"PET_NPROC_PER_NODE={nproc_text}")
        if nproc_text.isdigit():
            per_node = parse_int(nproc_text, "PET_NPROC_PER_NODE")
    return Signal(
        "the Kubeflow pod (PyTorchJob or TrainJob)",
        ", ".join(found),
        processes=(nodes or 1) * (per_node or 1) if nodes or per_node else None,
        copies=nodes,
        per_node=per_node,
        fix="make the container's command `torchrun train.py`: torchrun reads the PET_* "
        "variables and starts numProcPerNode ranks in every pod",
    )


#: Launchers that read the MPI sizes themselves (``srun --mpi=pmi2`` sets ``PMI_SIZE`` to the
#: step's task count, so Slurm is one of them).
_MPI_AWARE = frozenset({"openmpi", "mvapich", "mpich", "pals", "pmix", "lsf", "slurm"})


def _mpi(env: Mapping[str, str], launcher: str) -> Signal | None:
    if launcher in _MPI_AWARE:
        return None
    for var, name in (
        ("OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun"),
        ("MV2_COMM_WORLD_SIZE", "MVAPICH2's launcher"),
        ("PMI_SIZE", "an MPI launcher (PMI)"),
    ):
        size = _int(env, var)
        if size is not None:
            return Signal(
                name,
                size[1],
                processes=size[0],
                copies=size[0],
                fix="start the ranks directly with the MPI launcher (`mpirun -np "
                f"{size[0]} python train.py`; accelbackends reads its variables), or one "
                "torchrun per node with a shared --rdzv-endpoint",
            )
    return None


#: Variables only ``accelerate launch`` sets (Accelerate 0.20 to 1.15): a process that has one
#: was started by it.
_ACCELERATE_LAUNCH = ("ACCELERATE_DYNAMO_BACKEND", "ACCELERATE_MIXED_PRECISION")


def _accelerate_launch(env: Mapping[str, str], launcher: str) -> Signal | None:
    # Without --multi_gpu (or a config saying so) `accelerate launch --num_processes N` starts
    # ONE process with plain Python and tells it nothing of N; it sets MASTER_ADDR and
    # MASTER_PORT only where N > 1 or --num_machines > 1 (accelerate/utils/launch.py,
    # prepare_simple_launcher_cmd_env, Accelerate 0.20 to 1.15). With --multi_gpu it runs
    # torchrun, which the torchrun environment recognises.
    if launcher != "single":
        return None
    marks = [f"{name}={shown(env[name])}" for name in _ACCELERATE_LAUNCH if name in env]
    if not marks or not (env.get("MASTER_ADDR") and env.get("MASTER_PORT")):
        return None
    return Signal(
        "accelerate launch (its one-process launcher)",
        ", ".join(
            [
                *marks,
                f"MASTER_ADDR={shown(env['MASTER_ADDR'])}",
                f"MASTER_PORT={shown(env['MASTER_PORT'])}",
            ]
        )
        + ": it sets MASTER_* only for --num_processes or --num_machines above 1",
        processes=2,
        # Accelerate 1.15 refuses --cpu beside --multi_gpu ("You can only use one of --cpu,
        # --multi_gpu ..."); --multi_gpu alone runs torchrun on a CPU-only machine too.
        fix="add --multi_gpu (only then does accelerate launch start torchrun, on a CPU-only "
        "machine too: `accelerate launch --multi_gpu --num_processes N train.py`), or run "
        "`torchrun --nproc-per-node N train.py`",
    )


def signals(cluster: ClusterInfo, env: Mapping[str, str]) -> tuple[Signal, ...]:
    """Every launcher's or scheduler's statement about the job's size in ``env``: the Slurm
    allocation or step (unless srun started this process itself), SkyPilot's run command,
    Kubeflow's ``PET_*`` variables, an MPI launcher's size (unless an MPI launcher or srun
    started this process), ``accelerate launch`` asked for several processes but started
    one."""
    found = (
        _slurm(env, cluster.launcher),
        _skypilot(env),
        _kubeflow(env),
        _mpi(env, cluster.launcher),
        _accelerate_launch(env, cluster.launcher),
    )
    return tuple(signal for signal in found if signal is not None)


def _world(cluster: ClusterInfo) -> str:
    if cluster.launcher == "single":
        return "a world of 1 (no launcher recognised)"
    return (
        f"a world of {cluster.world_size} ({cluster.launcher}: "
        f"{cluster.source('world_size')}={cluster.world_size})"
    )


def _agents(cluster: ClusterInfo, env: Mapping[str, str]) -> tuple[int, str]:
    """How many torchrun agents (nodes) the torchrun job spans, and how that is known."""
    found = _int(env, "GROUP_WORLD_SIZE")
    if found is not None:
        return found
    agents = -(-cluster.world_size // cluster.local_world_size)
    return agents, (
        f"WORLD_SIZE={cluster.world_size} / LOCAL_WORLD_SIZE={cluster.local_world_size}"
    )


def _outer_problem(
    cluster: ClusterInfo, env: Mapping[str, str], found: tuple[Signal, ...]
) -> str | None:
    for signal in found:
        if signal.per_node is not None and cluster.local_world_size < signal.per_node:
            return (
                f"{signal.scheduler} reserved room for {signal.per_node} processes on each node "
                f"({signal.variables}), but this node runs {cluster.local_world_size} "
                f"({cluster.launcher}: {cluster.source('local_world_size')}="
                f"{cluster.local_world_size}): the rest would sit idle. Fix: {signal.fix}; "
                f"{_STANDALONE_HINT}"
            )
        if cluster.world_size == 1 and max(signal.processes or 1, signal.copies or 1) > 1:
            return (
                f"this process is {_world(cluster)}, but {signal.scheduler} says the job spans "
                f"more ({signal.variables}): it would train alone and exit as if the job had "
                f"run. Fix: {signal.fix}; {_STANDALONE_HINT}"
            )
        if cluster.launcher == "torchrun" and signal.copies is not None:
            agents, how = _agents(cluster, env)
            if agents < signal.copies:
                return (
                    f"torchrun's job spans {agents} node{'s' if agents != 1 else ''} ({how}), "
                    f"but {signal.scheduler} {signal.copies_said.format(n=signal.copies)} "
                    f"({signal.variables}): each would train a job of its own. Fix: use "
                    f"torchrun --nnodes {signal.copies} with one --rdzv-endpoint for all of "
                    f"them (rank 0's host:port), or {signal.fix}; {_STANDALONE_HINT}"
                )
    return None


def _environment_problem(cluster: ClusterInfo, env: Mapping[str, str]) -> str | None:
    wrong = []
    for name, field_name in _JOB_VARIABLES.items():
        value = env.get(name, "").strip()
        said = getattr(cluster, "local_rank_variable" if name == "LOCAL_RANK" else field_name)
        if value and value != str(said):
            wrong.append(
                f"{name}={shown(value)} (the {cluster.launcher} launcher: "
                f"{cluster.source(field_name)}={getattr(cluster, field_name)})"
            )
    if not wrong:
        return None
    return (
        f"this process's environment says {', '.join(wrong)}: a framework reading these "
        "variables would train another job than the one the launcher started. Unset them "
        "(a parent job's, or set by hand), or launch so that they match"
    )


def check(cluster: ClusterInfo, env: Mapping[str, str], *, standalone: bool = False) -> Verdict:
    """The verdict on ``cluster`` (as recognised from ``env``) against every other signal in
    ``env``; `Verdict.raise_for_problem` turns a contradiction into a `ConfigError`."""
    problem = _environment_problem(cluster, env)
    if cluster.launcher in _OWN_SCHEDULER:
        return Verdict(
            problem=problem,
            standalone=standalone,
            skipped=f"{cluster.launcher} places its workers itself: the variables of the "
            "launchers around it describe its daemons, not this job",
        )
    found = signals(cluster, env)
    if problem is None and not standalone:
        problem = _outer_problem(cluster, env, found)
    return Verdict(signals=found, problem=problem, standalone=standalone)


def _skypilot_devices(
    cluster: ClusterInfo, status: AcceleratorStatus, env: Mapping[str, str]
) -> str | None:
    """GPUs SkyPilot reserved on every node beside a CPU selection: the task would hold
    devices it never uses (the same refusal as Ray Train's integration's)."""
    if cluster.launcher in _OWN_SCHEDULER or status.spec.device_type != "cpu":
        return None
    if not env.get("SKYPILOT_NODE_RANK", "").strip():
        return None
    gpus = _int(env, "SKYPILOT_NUM_GPUS_PER_NODE")
    if gpus is None or gpus[0] < 1:
        return None
    return (
        f"SkyPilot reserved {gpus[0]} GPU{'s' if gpus[0] != 1 else ''} on each node "
        f"({gpus[1]}), but accelbackends selected the cpu accelerator: the task would hold "
        "devices it never uses. Run `accelbackends info` on a node to see why no GPU was "
        "selected, or leave `accelerators:` out of the task's resources"
    )


def check_devices(
    cluster: ClusterInfo,
    status: AcceleratorStatus,
    env: Mapping[str, str],
    *,
    standalone: bool = False,
) -> str | None:
    """SkyPilot's reserved GPUs and Kubeflow's ``PET_NPROC_PER_NODE`` against the selected
    accelerator and its visible devices, or None where they agree (or there is nothing to
    compare)."""
    if (problem := _skypilot_devices(cluster, status, env)) is not None:
        return problem
    nproc = env.get("PET_NPROC_PER_NODE", "").strip()
    count = status.detection.device_count
    if not nproc or cluster.launcher in _OWN_SCHEDULER or status.spec.device_type == "cpu":
        return None
    name = status.name
    if nproc.isdigit() or cluster.launcher == "torchrun":
        ranks = int(nproc) if nproc.isdigit() else cluster.local_world_size
        if count > 0 and ranks > count:
            return (
                f"PET_NPROC_PER_NODE={nproc} starts {ranks} processes in this pod but the "
                f"selected accelerator {name!r} has {count} visible "
                f"device{'s' if count != 1 else ''}: Kubeflow Trainer turns numProcPerNode "
                "'auto' into the pod's CPU count unless a resource name contains \"gpu\" (an "
                "Ascend NPU or Gaudi HPU pod gets one process per CPU). Fix: set "
                f"numProcPerNode: {count} in the TrainJob (or the PyTorchJob's nprocPerNode)"
            )
        return None
    if nproc in ("auto", "gpu") and count > 1 and not standalone:
        return (
            f"PET_NPROC_PER_NODE={nproc} means one process per device, and {count} {name} "
            "devices are visible in this pod, but this process was not started by torchrun "
            f"and would train on one of them. Fix: make the container's command `torchrun "
            f"train.py`, or request one device per pod; {_STANDALONE_HINT}"
        )
    return None
