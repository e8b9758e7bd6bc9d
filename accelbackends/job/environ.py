"""What `accelbackends.init` tells the frameworks through the environment after it made
a group of more than one rank, and the check that the environment does not describe another job.

Frameworks read the job from environment variables, not from `torch.distributed`: Accelerate
and Lightning decide whether to run distributed (and Lightning whether to start processes of its
own) from `LOCAL_RANK`/`WORLD_SIZE`; Accelerate ignores a CPU group unless
`ACCELERATE_USE_CPU` is set; DeepSpeed detects its accelerator again unless `DS_ACCELERATOR`
names it. Under `mpirun` or `srun` none of these is set, so each framework would see a
one-rank job beside the group accelbackends made. `export` sets what is missing;
`restore` (called by `destroy()`) takes it back.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import Any

from ..environments.variables import env_variables
from ..plugin.errors import InitError
from . import children

__all__ = ["DEEPSPEED_ACCELERATORS", "export", "job_variables", "restore"]

#: The names DeepSpeed's `DS_ACCELERATOR` accepts that are also accelbackends accelerators.
DEEPSPEED_ACCELERATORS = frozenset({"cpu", "cuda", "xpu", "hpu", "npu", "mps", "mlu"})

_set_by_us: list[str] = []
_exported_for: list[Any] = []  # the context export() last ran for, until restore()


def job_variables(context: Any) -> dict[str, str]:
    """The `env://` variables that describe `context`'s place in the job (``LOCAL_RANK`` as
    the launcher says it: 0 in every worker of torchrun's ``--virtual-local-rank``)."""
    cluster = getattr(context, "cluster", None)
    local = cluster.local_rank_variable if cluster is not None else context.local_rank
    return env_variables(context.rank, context.world_size, local, context.local_world_size)


def _framework_variables(context: Any) -> dict[str, str]:
    variables = job_variables(context)
    if context.accelerator == "cpu":
        variables["ACCELERATE_USE_CPU"] = "true"
    else:
        variables["ACCELERATE_TORCH_DEVICE"] = str(context.device)
    if context.accelerator in DEEPSPEED_ACCELERATORS:
        variables["DS_ACCELERATOR"] = context.accelerator
    return variables


_AFTER_INIT_HINT = (
    ". If a framework started processes of its own after accelbackends.init() (Lightning under "
    "`python train.py`), pass it accelbackends' integration (plugins=[accelbackends."
    "integrations.lightning.AccelBackendsEnvironment()]) and call accelbackends.attach() "
    "after it made the group"
)


def check(context: Any, env: Any = None, *, after_init: bool = False) -> None:
    """Fail when a `env://` variable in the environment names another place in another job
    than `context` (a stale `RANK` from a parent job, a `WORLD_SIZE` set by hand)."""
    env = os.environ if env is None else env
    wrong = [
        f"{name}={env[name]} (the group: {value})"
        for name, value in job_variables(context).items()
        if name in env and env[name].strip() != value
    ]
    if wrong:
        raise InitError(
            f"the process group accelbackends made (rank {context.rank} of "
            f"{context.world_size}, launcher {context.launcher}) disagrees with this process's "
            f"environment: {', '.join(wrong)}; a framework reading these variables would train "
            "a different job. Unset them, or launch so that they match"
            + (_AFTER_INIT_HINT if after_init else "")
        )


def export(context: Any) -> None:
    """Check the environment against `context` and, for a group of more than one rank, set
    the variables the frameworks read where they are missing."""
    check(context)
    if not _exported_for:
        atexit.register(_check_at_exit)
    _exported_for[:] = [context]
    if context.world_size < 2:
        # A one-rank group: Lightning must still be free to start its own processes.
        return
    for name, value in _framework_variables(context).items():
        if name not in os.environ:
            os.environ[name] = value
            _set_by_us.append(name)


def restore() -> None:
    """Remove what `export` set."""
    _exported_for.clear()
    while _set_by_us:
        os.environ.pop(_set_by_us.pop(), None)


def _check_at_exit() -> None:
    """The last chance to see that a framework ran another job beside the group (Lightning
    rewriting `WORLD_SIZE` in a parent that then trained alone): a script that never called
    `destroy()` must not exit 0 then. An exception in an exit handler would not change the
    exit status, so the process ends with status 1 here."""
    if not _exported_for:
        return
    # The process is ending on the refusal of a Lightning rank of another world (raised out of
    # Lightning's Popen): the same disagreement, already said, and the exit status is 1.
    if children.refused(getattr(sys, "last_value", None)):
        return
    try:
        check(_exported_for[0], after_init=True)
    except InitError as exc:
        sys.stderr.write(f"accelbackends: InitError: {exc}\n")
        sys.stderr.flush()
        os._exit(1)
