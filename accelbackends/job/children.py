"""No rank processes of another world started beside the group `init()` made.

Lightning run as ``python train.py`` with ``devices=N`` starts N - 1 copies of the script itself
(its subprocess launcher, Lightning 2.0 to 2.6), describing their place with ``LOCAL_RANK``,
``WORLD_SIZE`` and ``NODE_RANK``, and then reuses whatever process group is already initialised.
After `accelbackends.init()` made a group of one, the copies are refused by their own `init()`
while the parent trains alone on its share of the data and exits 0. Nothing of
Lightning's says so before it trains; the one moment both views are in hand is when the parent
starts a copy: Python's audit event ``subprocess.Popen`` carries the child's environment.

`watch` registers an audit hook (once per process; audit hooks cannot be removed, so it does
nothing while no group of accelbackends is alive) that raises `InitError` where a process is
started with the environment of a Lightning rank
(`accelbackends.environments.lightning.lightning_rank`) whose world differs from the group's.
The error leaves ``Popen``, so Lightning's ``fit`` or ``launch`` fails before a single step.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from ..environments.lightning import lightning_rank
from ..plugin.errors import AccelBackendsError, InitError
from ..plugin.types import Context

__all__ = ["problem", "refused", "watch"]

_watching = False
#: The refusals the hook raised, so that the environment check at exit does not say the same
#: again where one of them ends the process (Lightning has rewritten ``WORLD_SIZE`` by then).
_refusals: list[InitError] = []


def refused(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a refusal of this module's hook."""
    return any(exc is r for r in _refusals)


def problem(env: Mapping[str, str], context: Context) -> str | None:
    """Why a child started with ``env`` would be a rank of another job than ``context``'s, or
    None where it would not be a Lightning rank or its world is the group's."""
    try:
        child = lightning_rank(env)
    except AccelBackendsError:
        return None  # not a shape Lightning writes: its own init() will say what is wrong
    if child is None or child.world_size == context.world_size:
        return None
    return (
        f"Lightning is starting rank {child.rank} of a world of {child.world_size} as a new "
        f"process (WORLD_SIZE={child.world_size}, LOCAL_RANK={child.local_rank}), but "
        f"accelbackends.init() already made a process group of {context.world_size} "
        f"(rank {context.rank}, launcher {context.launcher}): this process would train alone "
        "in it and exit as if the job had run. Under `python train.py` let Lightning start the "
        "processes: drop accelbackends.init(), pass plugins=[AccelBackendsEnvironment()] and "
        "call accelbackends.attach() after the strategy is set up; or start every rank with a "
        f"launcher (`torchrun --nproc-per-node {child.world_size} train.py`) and keep init()"
    )


def watch(current: Callable[[], Context | None]) -> None:
    """Refuse, from now on, to start a Lightning rank of another world than ``current()``'s
    group (while it returns one)."""
    global _watching
    if _watching:
        return
    _watching = True

    def hook(event: str, args: tuple[Any, ...]) -> None:
        # ("subprocess.Popen", (executable, args, cwd, env)); env None inherits ours, which
        # Lightning never relies on for its ranks.
        if event != "subprocess.Popen" or len(args) < 4 or not isinstance(args[3], Mapping):
            return
        context = current()
        if context is None:
            return
        found = problem({str(k): str(v) for k, v in args[3].items()}, context)
        if found is not None:
            error = InitError(found)
            _refusals.append(error)
            raise error

    sys.addaudithook(hook)
