"""``init()``, ``destroy()`` and ``distributed()``: the full path from detection to a process group.

The steps of ``init()``, in the order the code runs them (each marked ``# step: name`` below;
docs/img/lifecycle.dot draws the same names, and tests/job/test_lifecycle_steps.py holds the three
together):

1. ``recognise``: which job this is, from the launcher (`accelbackends.job.recognise`).
2. ``host``: rank 0 starts the rendezvous store early, while the slow steps run.
3. ``select``: detect every accelerator and choose one, with its backend and why.
4. ``pin``: CPU and NUMA affinity for this local rank, when asked for.
5. ``confirm``: the accelerator's deep check, through torch.
6. ``bind``: this rank's device.
7. ``options``: the backend options (the accelerator's, then the options hook).
8. ``rendezvous``: every rank joins within the join timeout and proves it holds the secret.
9. ``init_process_group``: with an explicit backend string and timeout.
10. ``verify``: every rank is in the group (the membership proof over the group, or a barrier).
11. ``seed``: Python, NumPy and torch, when asked for.
12. ``export``: the variables the frameworks read, checked against the group.
13. ``post_init``: the post-init hook.

Any failure on the way tears down what was built: no half-initialised process group remains.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import random
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from types import TracebackType
from typing import Any

from ..host import workers
from ..host.torchload import import_torch_distributed
from ..plugin import config, torchcompat
from ..plugin.errors import (
    AccelBackendsError,
    ConfigError,
    InitError,
    RendezvousError,
    describe,
    first_line,
)
from ..plugin.types import (
    BackendOptions,
    BindRequest,
    ClusterInfo,
    Context,
    OptionsRequest,
    Selection,
)
from ..registry.facade import Registry, default_registry, warn_unknown_variables
from ..rendezvous.membership import __name__ as _membership_module
from ..rendezvous.membership import verify_group
from ..rendezvous.network import GLOO_INTERFACE, gloo_interface_for
from ..rendezvous.store import (
    DEFAULT_RENDEZVOUS_TIMEOUT,
    Rendezvous,
    host_early,
    meet,
    quiet_torch_logs,
    tell_the_job,
)
from ..rendezvous.store import __name__ as _rendezvous_module
from . import affinity, children, worldcheck
from . import environ as _environment
from . import recognise as _recognition
from .failure import stamp, stamped
from .select import select
from .undo import EnvironmentChanges

__all__ = ["DEFAULT_TIMEOUT", "Context", "destroy", "distributed", "init", "is_initialized"]

#: The collective timeout when neither ``timeout=`` nor ``ACCELBACKENDS_TIMEOUT`` says otherwise
#: (torch's own default for non-NCCL backends, passed explicitly).
DEFAULT_TIMEOUT = 1800.0
_SEED_LIMIT = 2**32  # NumPy's legacy seeding accepts 0 .. 2**32 - 1
#: How long a rank that refused its configuration tries to tell rank 0, at most, seconds.
_TELL_LIMIT = 10.0


@dataclass
class _State:
    context: Context
    rendezvous: Rendezvous
    #: What destroy() undoes, last step first: the process group, the store, the environment.
    steps: contextlib.ExitStack


_state: _State | None = None
_generation = 0


def is_initialized() -> bool:
    """True between a successful [`init`][accelbackends.init] and
    [`destroy`][accelbackends.destroy]."""
    return _state is not None


def _check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value < low
        or (high is not None and value >= high)
    ):
        bound = f"an integer from {low} to {high - 1}" if high else f"an integer >= {low}"
        raise ConfigError(f"{name}={value!r} is not valid; use {bound}")
    return value


def _seconds(argument: object, name: str, variable: str, env: Any, default: float) -> float:
    if argument is not None:
        if isinstance(argument, timedelta):
            argument = argument.total_seconds()
        return config.parse_seconds(argument, source=name)
    from_env = config.read_seconds(env, variable)
    return default if from_env is None else from_env


def init(
    *,
    accelerator: str | None = None,
    backend: str | None = None,
    timeout: float | timedelta | None = None,
    rendezvous_timeout: float | timedelta | None = None,
    seed: int | None = None,
    seed_per_rank: bool = False,
    threads: int | None = None,
    cpu_affinity: str | bool | None = None,
    standalone: bool | None = None,
    cluster: ClusterInfo | None = None,
    registry: Registry | None = None,
) -> Context:
    """Detect, select, discover the cluster environment, bind the device and initialise
    `torch.distributed`.

    A second call with compatible arguments returns the same context; an incompatible one is a
    [`ConfigError`][accelbackends.ConfigError]. Call [`destroy`][accelbackends.destroy] to start
    over.

    Args:
        accelerator: Use this accelerator (overrides `ACCELBACKENDS_ACCELERATOR`).
        backend: Use this backend (overrides `ACCELBACKENDS_BACKEND`).
        timeout: Collective timeout, seconds or a timedelta (`ACCELBACKENDS_TIMEOUT`;
            default 1800 s).
        rendezvous_timeout: How long to wait for every rank to join
            (`ACCELBACKENDS_RENDEZVOUS_TIMEOUT`; default 300 s).
        seed: Seed Python's `random`, NumPy (if installed) and torch identically on every rank.
        seed_per_rank: Add the rank to `seed`, so each rank draws different numbers.
        threads: Intra-op threads for CPU work (default: cores divided by local ranks, unless
            `OMP_NUM_THREADS` is set).
        cpu_affinity: Pin this rank to CPUs near its device: `"numa"`, `"exclusive"`,
            `"auto"`/True, or `"off"`/False (overrides `ACCELBACKENDS_CPU_AFFINITY`; default
            off). See [CPU affinity](../affinity.md).
        standalone: A world smaller than the scheduler's allocation is meant: a one-process
            step inside a Slurm allocation of many tasks, one independent torchrun per node
            (overrides `ACCELBACKENDS_STANDALONE`; default off: such a world is a
            `ConfigError` naming the scheduler's variables and the fix). See
            [Engines](../engines/index.md).
        cluster: Use this cluster description instead of recognising the launcher (and
            comparing it with the scheduler's variables).
        registry: Use this registry instead of the process's default.

    Returns:
        Where this process stands in the job: rank, device, backend and why.

    Raises:
        SelectionError: An unknown or unavailable accelerator, or an unsupported backend.
        ConfigError: A malformed argument or variable, or a call incompatible with the first.
        RendezvousError: The ranks did not all join within the rendezvous timeout.
        InitError: torch could not initialise the chosen backend.
    """
    started = time.perf_counter()
    registry = registry or default_registry()
    asked = _checked(
        registry.env,
        accelerator=accelerator,
        backend=backend,
        timeout=timeout,
        rendezvous_timeout=rendezvous_timeout,
        seed=seed,
        seed_per_rank=seed_per_rank,
        threads=threads,
        cpu_affinity=cpu_affinity,
        standalone=standalone,
        cluster=cluster,
    )
    if _state is not None:
        return _again(_state, asked)
    cluster, recognised = _step_recognise(registry, asked, cluster)
    # Each step that leaves something behind registers its undo here: a failure anywhere unwinds
    # them all (os.environ exactly as found, TORCH_CPP_LOG_LEVEL included, no store left
    # listening); on success the stack moves into _State and destroy() unwinds it.
    # stamped(): the moment of a failure is taken before the steps are undone (spawn names the
    # rank that failed first; the undo makes its peers fail too).
    with _refusal_told(cluster, asked.join_s), contextlib.ExitStack() as steps, stamped():
        run = _Run(registry, cluster, asked, started, steps, EnvironmentChanges())
        steps.callback(run.environment.undo)
        _torch_distributed()
        _step_host(run)
        selection = _step_select(run, recognised)
        with _step_pin(run, selection) as cpus:
            return _initialise(run, selection, cpus)


@dataclass(frozen=True)
class _Asked:
    """One ``init()`` call's arguments as given, checked, and what they resolve to with the
    variables that stand in for them."""

    accelerator: str | None
    backend: str | None
    timeout: float | timedelta | None
    rendezvous_timeout: float | timedelta | None
    seed: int | None
    seed_per_rank: bool
    threads: int | None
    cpu_affinity: str | bool | None
    timeout_s: float
    join_s: float
    pin_mode: str
    standalone: bool


@dataclass
class _Run:
    """What the steps of one ``init()`` hand on: the job, the call, and the undo stack."""

    registry: Registry
    cluster: ClusterInfo
    asked: _Asked
    started: float
    steps: contextlib.ExitStack
    environment: EnvironmentChanges
    server: _Held | None = None


def _checked(
    env: Any, *, cluster: ClusterInfo | None, standalone: bool | None, **given: Any
) -> _Asked:
    """The arguments checked, bad input first, in the order ``init()`` names them."""
    timeout_s = _seconds(given["timeout"], "timeout", config.TIMEOUT, env, DEFAULT_TIMEOUT)
    join_s = _seconds(
        given["rendezvous_timeout"],
        "rendezvous_timeout",
        config.RENDEZVOUS_TIMEOUT,
        env,
        DEFAULT_RENDEZVOUS_TIMEOUT,
    )
    if given["seed"] is not None:
        _check_int("seed", given["seed"], 0, _SEED_LIMIT)
    if given["threads"] is not None:
        _check_int("threads", given["threads"], 1)
    if cluster is not None and not isinstance(cluster, ClusterInfo):
        raise ConfigError(f"cluster={cluster!r} is not valid; pass an accelbackends.ClusterInfo")
    pin_mode = affinity.resolve_mode(given["cpu_affinity"], env)
    meant_standalone = worldcheck.standalone(standalone, env)
    return _Asked(
        **given, timeout_s=timeout_s, join_s=join_s, pin_mode=pin_mode, standalone=meant_standalone
    )


def _again(state: _State, asked: _Asked) -> Context:
    """A second ``init()`` while the first one's group stands: its context, if compatible."""
    context = _same_context(
        state.context,
        accelerator=asked.accelerator,
        backend=asked.backend,
        timeout=None if asked.timeout is None else asked.timeout_s,
        rendezvous_timeout=None if asked.rendezvous_timeout is None else asked.join_s,
        seed=asked.seed if state.context.seed is not None else None,
        threads=asked.threads,
        cpu_affinity=None if asked.cpu_affinity is None else asked.pin_mode,
    )
    if asked.seed is not None and context.seed is None:
        # The seed is not a property of the group but something done once: a first call
        # that seeded nothing (Ray Train's TorchConfig() in its worker, before the training
        # function's own `distributed(seed=0)`) leaves it to this one.
        _seed(asked.seed + (context.rank if asked.seed_per_rank else 0))
        context = state.context = replace(context, seed=asked.seed)
    return context


def _torch_distributed() -> Any:
    """``torch.distributed``, imported once its C++ log is quiet (the environment's snapshot
    restores the level), and not initialised by someone else."""
    quiet_torch_logs()  # torch reads it at import, just below
    dist = import_torch_distributed()
    if dist.is_initialized():
        raise InitError(
            "torch.distributed is already initialised by code outside accelbackends "
            f"(backend {dist.get_backend()}); call accelbackends.attach() to get a context "
            "for that group, or torch.distributed.destroy_process_group() first"
        )
    return dist


@contextlib.contextmanager
def _refusal_told(cluster: ClusterInfo, join_s: float) -> Iterator[None]:
    """A rank other than 0 whose ``init()`` fails (a bad variable, an accelerator this node
    lacks, a placement the world check refuses, a device the runtime refuses, a failing bind
    or deep check) tells rank 0 through the store as it leaves: where the launcher does not
    stop the job (MPICH's Hydra, plain env://), the other ranks would otherwise wait for it the
    whole rendezvous timeout. A rendezvous error is not told: rank 0 learns of it
    through the rendezvous itself."""
    try:
        yield
    except RendezvousError:
        raise
    except AccelBackendsError as exc:
        what = "refused its configuration" if isinstance(exc, ConfigError) else "failed in init()"
        tell_the_job(
            cluster,
            f"rank {cluster.rank} ({socket.gethostname()}, pid {os.getpid()}) {what} and "
            f"left: {first_line(exc)}",
            min(join_s, _TELL_LIMIT),
        )
        raise


def _same_context(context: Context, **requested: Any) -> Context:
    import torch.distributed as dist

    if not dist.is_initialized():
        raise InitError(
            "the process group made by accelbackends.init() was destroyed behind its back "
            "(torch.distributed.destroy_process_group()); call accelbackends.destroy() first"
        )
    for name, value in requested.items():
        if name == "backend" and value == context.process_group_backend:
            continue  # the process group's string, as the first call may have been given it
        if value is not None and value != getattr(context, name):
            first = (
                "accelbackends.integrations.ray.TorchConfig made the first call in this Ray "
                f"Train worker: give it {name}={value!r}, and leave {name} out here"
                if context.launcher == "ray"
                else f"pass {name}={value!r} to the first call, and leave {name} out here"
            )
            raise ConfigError(
                f"accelbackends.init() already ran with {name}={getattr(context, name)!r}; "
                f"this call asks for {name}={value!r}, and one process has one process group. "
                f"Fix: {first} (a second init() without it returns the first call's context)"
            )
    return context


def _plugin_call(what: str, plugin: str, call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except AccelBackendsError:
        raise
    except Exception as exc:
        raise InitError(f"{what} failed in plugin {plugin!r}: {describe(exc)}") from exc


class _Held:
    """Rank 0's store (or None), let go of by the undo steps. TCPStore has no close(): its port
    is freed when the last reference goes, and a failed ``init()``'s traceback keeps its frames'
    locals alive (in a notebook, until the next error), so a retry would find "address in use"."""

    def __init__(self, store: Any | None) -> None:
        self.store = store

    def release(self) -> None:
        self.store = None


def _forget_stores_in_traceback(
    kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
) -> bool:
    """On failure, drop the locals of the finished frames that hold a store (the rendezvous
    and membership modules', and the steps' below that hold one), for the reason ``_Held``
    gives."""
    while traceback is not None:
        frame = traceback.tb_frame
        if frame.f_globals.get("__name__") in (_rendezvous_module, _membership_module) or (
            frame.f_code in _STORE_HOLDERS
        ):
            with contextlib.suppress(RuntimeError):  # still executing: not ours to clear
                frame.clear()
        traceback = traceback.tb_next
    return False


def _initialise(run: _Run, selection: Selection, cpus: frozenset[int] | None) -> Context:
    """The steps after the pin, each a function below, in the order they run."""
    _step_confirm(selection)
    device = _step_bind(run, selection, cpus)
    options = _step_options(run, selection, device)
    rendezvous = _step_rendezvous(run, selection, options)
    _step_init_process_group(run, rendezvous, options)
    _step_verify(run, rendezvous, options, device)
    _step_seed(run)
    context = _context(run, selection, device, options, cpus)
    _step_export(run, context, rendezvous)
    _step_post_init(run, context)
    return context


def _step_recognise(
    registry: Registry, asked: _Asked, cluster: ClusterInfo | None
) -> tuple[ClusterInfo, bool]:
    """Which job this is (and whether it was recognised rather than given), checked against
    every other scheduler's variables before torch is imported."""
    # step: recognise
    recognised = cluster is None
    if cluster is None:
        cluster = _recognition.cluster_for_init(registry)
        # Before torch is imported: a world smaller than the job fails here, in milliseconds.
        with _refusal_told(cluster, asked.join_s):
            worldcheck.check(cluster, registry.env, standalone=asked.standalone).raise_for_problem()
    if cluster.rank == 0:  # once per job, not once per rank
        warn_unknown_variables(registry)
    requested = (
        asked.accelerator
        if asked.accelerator is not None
        else config.read_name(registry.env, config.ACCELERATOR)
    )
    if requested is not None and requested not in {s.name for s in registry.detect()}:
        # A misspelt accelerator fails before torch is imported (11-15 s on a GPU node's large
        # environment), with the message select() gives after it.
        with _refusal_told(cluster, asked.join_s):
            select(asked.accelerator, asked.backend, registry=registry)
    return cluster, recognised


def _step_host(run: _Run) -> None:
    # step: host
    run.server = _Held(host_early(run.cluster, run.asked.join_s))  # before the slow part
    run.steps.callback(run.server.release)
    run.steps.push(_forget_stores_in_traceback)


def _step_select(run: _Run, recognised: bool) -> Selection:
    # step: select
    selection = select(run.asked.accelerator, run.asked.backend, registry=run.registry)
    if recognised and (
        problem := worldcheck.check_devices(
            run.cluster, selection.status, run.registry.env, standalone=run.asked.standalone
        )
    ):
        raise ConfigError(problem)
    return selection


def _step_pin(
    run: _Run, selection: Selection
) -> contextlib.AbstractContextManager[frozenset[int] | None]:
    # step: pin
    asked = run.asked
    return affinity.pinned(
        asked.pin_mode, run.registry, selection.status, run.cluster, asked.threads
    )


def _step_confirm(selection: Selection) -> None:
    # step: confirm
    status, spec = selection.status, selection.spec
    if spec.confirm is not None:
        disagreement = _plugin_call("the deep check", status.plugin, spec.confirm)
        if disagreement:
            raise InitError(
                f"accelerator {spec.name!r} was detected ({status.detection.reason}), "
                f"but torch disagrees: {disagreement}"
            )


def _step_bind(run: _Run, selection: Selection, cpus: frozenset[int] | None) -> Any:
    # step: bind
    cluster, spec = run.cluster, selection.spec
    request = BindRequest(
        cluster.local_rank,
        cluster.local_world_size,
        cluster,
        run.registry.env,
        run.asked.threads,
        cpus,
    )
    device = _plugin_call(
        f"binding local rank {cluster.local_rank} to a {spec.name} device",
        selection.status.plugin,
        spec.bind,
        request,
    )
    if cluster.world_size > 1 and "LOCAL_RANK" not in os.environ:
        # torch 2.15's NCCL (ProcessGroupNCCL2) picks its GPU when the group is created, from
        # LOCAL_RANK where set, else from the global rank: under a launcher that sets no
        # LOCAL_RANK (srun, mpirun) that could be another GPU than the one bound. The
        # frameworks' variables are exported after init anyway; the environment's undo takes
        # this one back if init fails, destroy() when it succeeded.
        os.environ["LOCAL_RANK"] = str(cluster.local_rank)
    return device


def _step_options(run: _Run, selection: Selection, device: Any) -> BackendOptions:
    # step: options
    status, spec, cluster = selection.status, selection.spec, run.cluster
    timeout = timedelta(seconds=run.asked.timeout_s)
    if spec.backend_options is not None:
        options = _plugin_call(
            "building the backend options",
            status.plugin,
            spec.backend_options,
            OptionsRequest(selection.backend, device, timeout, cluster, run.registry.env),
        )
        if not isinstance(options, BackendOptions):
            raise InitError(
                f"plugin {status.plugin!r}: backend_options returned {options!r}, "
                "not BackendOptions"
            )
    else:
        options = BackendOptions(process_group_backend=selection.backend, timeout=timeout)
    if selection.process_group_backend is not None:
        # The user gave the process group's string itself (cpu:gloo,cuda:nccl): passed as given.
        options = replace(options, process_group_backend=selection.process_group_backend)
    options = run.registry.backend_options(spec, options, cluster)
    for key, value in options.env_defaults.items():
        os.environ.setdefault(key, value)
    interface = gloo_interface_for(
        options.process_group_backend,
        cluster.master_addr,
        cluster.world_size > cluster.local_world_size,
    )
    if interface is not None:
        os.environ[GLOO_INTERFACE] = interface
    return options


def _step_rendezvous(run: _Run, selection: Selection, options: BackendOptions) -> Rendezvous:
    global _generation
    # step: rendezvous
    # Rank 0 opens a new attempt every time; another rank joins the one rank 0 opened, at
    # least one later than the last it joined, and counts only attempts it joined: a failed
    # attempt of one rank (a connection reset by the previous cycle's store) does not set the
    # ranks one attempt apart for good.
    cluster, server = run.cluster, run.server
    assert server is not None  # the host step ran
    if cluster.rank == 0:
        _generation += 1
    rendezvous = meet(
        cluster,
        join_timeout=run.asked.join_s,
        generation=_generation if cluster.rank == 0 else _generation + 1,
        server=server.store,
        env=run.registry.env,
        # Compared by rank 0 before init_process_group: ranks that chose differently would
        # wait for each other the whole collective timeout.
        choice={
            "accelerator": selection.spec.name,
            "backend": selection.backend,
            "process_group_backend": options.process_group_backend,
            "reason": f"{selection.reason}; {selection.backend}: {selection.backend_reason}",
            **_device_claim(options),
        },
    )
    if cluster.rank != 0 and rendezvous.generation:
        _generation = rendezvous.generation
    server.store = rendezvous.raw  # rank 0's own store, when meet() started it, goes the same way
    rendezvous.raw.set_timeout(options.timeout)
    rendezvous.bound_reads(options.timeout.total_seconds())
    return rendezvous


def _step_init_process_group(run: _Run, rendezvous: Rendezvous, options: BackendOptions) -> None:
    import torch.distributed as dist

    # step: init_process_group
    cluster = run.cluster
    extra: dict[str, Any] = {}
    if options.device_id is not None:
        extra["device_id"] = options.device_id
    try:
        dist.init_process_group(
            backend=options.process_group_backend,
            store=rendezvous.store,
            rank=cluster.rank,
            world_size=cluster.world_size,
            timeout=options.timeout,
            pg_options=options.pg_options,
            **extra,
        )
    except Exception as exc:
        raise InitError(
            f"init_process_group(backend={options.process_group_backend!r}) failed on rank "
            f"{cluster.rank}: {first_line(exc)}"
        ) from exc
    run.steps.callback(_destroy_process_group)


def _step_verify(run: _Run, rendezvous: Rendezvous, options: BackendOptions, device: Any) -> None:
    # step: verify
    cluster, join_s = run.cluster, run.asked.join_s
    verified = False
    if rendezvous.admission is not None and rendezvous.admission.secret.enabled:
        # Before the first user collective: a process that slipped into the collectives by
        # writing store keys directly cannot answer this. Every rank has finished
        # init_process_group once it completes, so it is also the barrier below.
        group_backend = options.process_group_backend
        verified = verify_group(
            rendezvous.admission,
            cluster.rank,
            cluster.world_size,
            # CPU tensors wherever the process group has a CPU backend: no device work.
            "cpu" if "gloo" in group_backend or "cpu:" in group_backend else device,
            join_s,
        )
    if not verified:
        _wait_until_every_rank_is_connected(cluster, rendezvous, join_s)


def _step_seed(run: _Run) -> None:
    # step: seed
    asked = run.asked
    if asked.seed is not None:
        _seed(asked.seed + (run.cluster.rank if asked.seed_per_rank else 0))


def _context(
    run: _Run,
    selection: Selection,
    device: Any,
    options: BackendOptions,
    cpus: frozenset[int] | None,
) -> Context:
    """The context the steps built, for the user and for ``destroy()``."""
    cluster = run.cluster
    return Context(
        rank=cluster.rank,
        world_size=cluster.world_size,
        local_rank=cluster.local_rank,
        local_world_size=cluster.local_world_size,
        node_rank=cluster.node_rank,
        device=device,
        accelerator=selection.spec.name,
        backend=selection.backend,
        process_group_backend=options.process_group_backend,
        launcher=cluster.launcher,
        master_addr=cluster.master_addr,
        master_port=cluster.master_port,
        timeout=options.timeout.total_seconds(),
        rendezvous_timeout=run.asked.join_s,
        seed=run.asked.seed,
        threads=run.asked.threads,
        reason=selection.reason,
        selection=selection,
        cluster=cluster,
        init_seconds=time.perf_counter() - run.started,
        cpu_affinity=run.asked.pin_mode,
        cpus=cpus,
    )


def _step_export(run: _Run, context: Context, rendezvous: Rendezvous) -> None:
    global _state, _exit_hook_registered
    # step: export
    run.steps.callback(_environment.restore)
    _environment.export(context)  # fails if the environment describes another job
    _state = _State(context, rendezvous, run.steps.pop_all())
    children.watch(_current_context)  # Lightning starting ranks of another world: refused
    if not _exit_hook_registered:
        workers.at_exit()  # registered first, so it runs after _destroy_at_exit
        atexit.register(_destroy_at_exit)
        _exit_hook_registered = True


def _step_post_init(run: _Run, context: Context) -> None:
    # step: post_init
    try:
        run.registry.post_init(context)
    except BaseException as exc:
        stamp(exc)
        destroy()
        raise
    run.environment.keep()


#: The steps whose frames hold a store (the rendezvous, or rank 0's server) while they run.
_STORE_HOLDERS = frozenset(
    step.__code__
    for step in (
        _initialise,
        _step_host,
        _step_rendezvous,
        _step_init_process_group,
        _step_verify,
        _step_export,
    )
)


def _device_claim(options: BackendOptions) -> dict[str, str]:
    """What this rank tells rank 0 of its device, where the plugin knows its identity: rank 0
    refuses two ranks on one host holding one device over a backend that forbids it (each
    rank was given its own visible-devices value, so neither could see the other)."""
    if not options.device_identity:
        return {}
    return {
        "host": socket.gethostname(),
        "device": options.device_identity,
        "device_shown": options.device_shown or options.device_identity,
        "exclusive_device": options.exclusive_device,
    }


def _current_context() -> Context | None:
    return _state.context if _state is not None else None


def _destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        torchcompat.destroy_process_group()  # torch before 2.9 can deadlock here otherwise


def _wait_until_every_rank_is_connected(
    cluster: ClusterInfo, rendezvous: Rendezvous, join_s: float
) -> None:
    """A store barrier after ``init_process_group``: no rank returns (and may then tear down)
    before every rank has finished connecting. Without it, a rank whose own connections are up
    can exit while a peer's Gloo handshake with it is still in flight, and that peer fails with
    "Connection closed by peer" (seen at 16 ranks with torch 2.13). It also keeps the store's
    host, when that is rank 0, alive until everybody has read what they need from it."""
    if cluster.world_size == 1:
        return
    store = rendezvous.store  # prefixed per attempt
    if store.add("accelbackends/connected", 1) >= cluster.world_size:
        store.set("accelbackends/all-connected", "1")
    try:
        store.wait(["accelbackends/all-connected"], timedelta(seconds=join_s))
    except Exception as exc:
        raise RendezvousError(
            f"rank {cluster.rank}: not every rank finished connecting within {join_s:g} s "
            f"after the rendezvous ({first_line(exc)}); another rank probably failed in "
            "init_process_group"
        ) from None


def _seed(value: int) -> None:
    import torch

    random.seed(value)
    torch.manual_seed(value)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(value % _SEED_LIMIT)


_exit_hook_registered = False


def _destroy_at_exit() -> None:
    """`init()` without `destroy()`: tear the group down in an exit handler, while the
    interpreter is still whole. Left to the interpreter's finalisation, the Gloo backend's
    threads outlive the objects they use and abort the process ("terminate called without an
    active exception", 3 of 6 runs with torch 2.13 on CPU). A disagreement `destroy()` finds
    ends the process with status 1, as an exception in an exit handler would not."""
    if _state is None:
        return
    try:
        # Ending on the refusal of a Lightning rank of another world: the environment check
        # would say the same disagreement a second time (Lightning rewrote WORLD_SIZE first).
        _destroy(check_environment=not children.refused(getattr(sys, "last_value", None)))
    except InitError as exc:
        sys.stderr.write(f"accelbackends: InitError: {exc}\n")
        sys.stderr.flush()
        os._exit(1)
    except Exception as exc:  # the exit status stays the script's; say what went wrong
        sys.stderr.write(f"accelbackends: destroy() at exit failed: {first_line(exc)}\n")


def destroy() -> None:
    """Tear down the process group made by [`init`][accelbackends.init]; a no-op when there is
    none."""
    _destroy(check_environment=True)


def _destroy(*, check_environment: bool) -> None:
    global _state
    if _state is None:
        return
    state, _state = _state, None
    # Objects no longer reachable but not yet collected (a DDP module, a DeepSpeed engine in a
    # reference cycle) hold the group's Gloo backend and its worker threads; collected here,
    # their threads end while the interpreter is whole rather than during its finalisation.
    gc.collect()
    try:
        # A framework that rewrote the job's variables after init() (Lightning starting
        # processes of its own beside a one-rank group) ran a different job: say so.
        if check_environment:
            _environment.check(state.context, after_init=True)
    finally:
        # The process group, then the store, then the variables init() set (those the user
        # has not changed since).
        state.steps.close()
        # A DDP wrapper still alive keeps the group's Gloo workers: the last collective's are
        # let finish while the GIL is free (`accelbackends.host.workers`).
        workers.wait_until_idle()


@contextlib.contextmanager
def distributed(**kwargs: Any) -> Iterator[Context]:
    """Initialise for the duration of a `with` block: [`init`][accelbackends.init] on entry,
    [`destroy`][accelbackends.destroy] always on exit, also when the body raises.

    Takes the same keyword arguments as [`init`][accelbackends.init]. Inside a group made before
    the block (an earlier `init()`, or Ray Train's worker under
    `accelbackends.integrations.ray.TorchConfig`), the block uses that group and leaves its
    teardown to whoever made it; a `seed` the first call did not set is applied.

    Example:
        ```python
        with accelbackends.distributed(seed=0) as ctx:
            print(ctx.rank, ctx.device)
        ```
    """
    made = _state is None
    context = init(**kwargs)
    try:
        yield context
    finally:
        if made:
            destroy()
