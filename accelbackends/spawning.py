"""``spawn(fn, nprocs)``: run ``fn(ctx, *args)`` in N local ranks, for single-node jobs, notebooks
and tests.

The parent serves the rendezvous store over a Unix socket in a private directory
(`accelbackends.localstore`: no port to race for, nothing reachable from the network, and
none of the DNS look-ups that make torch's TCP store stall now and then), and Gloo is kept on the
loopback interface. Ranks are forked where that
is safe, which is what lets functions defined in a notebook cell or a script read from stdin run
(``torch.multiprocessing.spawn`` must pickle them by reference and cannot). If a rank fails, the
others are stopped at once and the parent raises
[`SpawnError`][accelbackends.SpawnError] naming the rank; no child outlives the call.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from .affinity import resolve_mode
from .isolation import stuck
from .localstore import LocalStoreServer
from .network import GLOO_INTERFACE, interface_towards
from .plugin.errors import ConfigError, SpawnError
from .plugin.types import ClusterInfo
from .selection import select

__all__ = ["spawn"]

# This module is not called ``spawn``: importing a submodule sets it as an attribute of the
# package, and ``accelbackends.spawn`` must stay the function.

#: After one rank fails, how long the others get to exit on SIGTERM before SIGKILL.
TERMINATE_GRACE = 3.0
#: After the first failure, how long to wait for other ranks' reports to find the earliest one.
SETTLE = 0.5
#: How far back a rank that died without reporting is dated when failures are ordered.
DEATH_LEAD = 0.5
_runs = itertools.count()


def _device_runtime_initialised() -> str | None:
    """The device runtime already initialised in this process, if any (fork would break it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    for name in ("cuda", "xpu"):
        module = getattr(torch, name, None)
        is_initialized = getattr(module, "is_initialized", None)
        if callable(is_initialized) and is_initialized():
            return name
    return None


def _start_method(requested: str | None, fn: Callable[..., Any]) -> str:
    methods = multiprocessing.get_all_start_methods()
    if requested is not None:
        if requested not in methods:
            raise ConfigError(
                f"start_method={requested!r} is not available here; use one of {', '.join(methods)}"
            )
        method = requested
    else:
        unsafe = _device_runtime_initialised() or stuck()
        method = "fork" if "fork" in methods and not unsafe else "spawn"
    if method != "fork":
        try:
            pickle.dumps(fn)
        except Exception as exc:
            raise ConfigError(
                f"fn={getattr(fn, '__qualname__', fn)!r} cannot be pickled for "
                f"start_method={method!r} ({exc}); functions defined in a notebook or in a "
                "script read from stdin need start_method='fork', which is only safe before "
                "a device runtime (CUDA, XPU) was initialised in this process and while no "
                f"plugin call is stuck in it{_stuck_note()}"
            ) from None
    return method


def _stuck_note() -> str:
    calls = stuck()
    return f" (stuck now: {'; '.join(calls)})" if calls else ""


def _watch_parent(parent: int) -> None:
    """Exit when the parent dies, so no rank outlives a killed ``spawn`` call."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="accelbackends-parent-watch", daemon=True).start()


def _child(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    cluster: ClusterInfo,
    init_options: dict[str, Any],
    conn: Connection,
    parent: int,
    store_fd: int,
) -> None:
    from .lifecycle import destroy, init

    if store_fd >= 0:
        with contextlib.suppress(OSError):
            os.close(store_fd)  # the parent's listening socket, inherited through fork
    # The parent stops ranks with SIGTERM: die by it, whatever handler the parent installed.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops us
    _watch_parent(parent)
    # Libraries that read the env:// variables see the same job as accelbackends does.
    os.environ.update(
        RANK=str(cluster.rank),
        WORLD_SIZE=str(cluster.world_size),
        LOCAL_RANK=str(cluster.local_rank),
        LOCAL_WORLD_SIZE=str(cluster.local_world_size),
    )
    # All ranks are on this host: keep Gloo's connections on the loopback interface, off the
    # network, and independent of whether this host's name resolves.
    loopback = interface_towards("127.0.0.1")
    if loopback and GLOO_INTERFACE not in os.environ:
        os.environ[GLOO_INTERFACE] = loopback
    try:
        ctx = init(cluster=cluster, **init_options)
        result = fn(ctx, *args)
    except BaseException as exc:
        # Report before tearing down: the teardown makes the other ranks fail too, and the
        # parent names the rank whose failure came first.
        conn.send(
            (
                "error",
                cluster.rank,
                type(exc).__name__,
                str(exc),
                traceback.format_exc(),
                time.monotonic(),
            )
        )
        conn.close()
        destroy()
        sys.exit(1)
    destroy()
    try:
        conn.send(("ok", cluster.rank, result))
    except Exception as exc:  # an unpicklable result
        conn.send(
            (
                "error",
                cluster.rank,
                type(exc).__name__,
                f"the return value of fn cannot be sent back: {exc}",
                "",
                time.monotonic(),
            )
        )
        sys.exit(1)
    finally:
        conn.close()


def _exit_description(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def spawn(
    fn: Callable[..., Any],
    nprocs: int,
    args: Sequence[Any] = (),
    *,
    start_method: str | None = None,
    **init_options: Any,
) -> list[Any]:
    """Run `fn(ctx, *args)` in `nprocs` local ranks, each after [`init`][accelbackends.init].

    Args:
        fn: Called on every rank with the [`Context`][accelbackends.Context] and ``args``.
        nprocs: How many ranks to start (>= 1).
        args: Extra positional arguments for ``fn``.
        start_method: ``fork`` (default where available and no device runtime was
            initialised in this process), ``spawn`` or ``forkserver``.
        init_options: Keyword arguments for [`init`][accelbackends.init] (`accelerator=`,
            `backend=`, `timeout=`, `seed=`, and `registry=` with the fork start method).

    Returns:
        The return values of ``fn``, indexed by rank.

    Raises:
        SpawnError: A rank raised or died; names the rank and carries its message.
    """
    if not callable(fn):
        raise ConfigError(f"fn={fn!r} is not callable; pass the function each rank runs")
    if not isinstance(nprocs, int) or isinstance(nprocs, bool) or nprocs < 1:
        raise ConfigError(f"nprocs={nprocs!r} is not valid; use an integer >= 1")
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise ConfigError(f"args={args!r} is not valid; pass a tuple of arguments for fn")
    if "cluster" in init_options:
        raise ConfigError("spawn() describes the cluster itself; do not pass cluster=")
    # Select here, once: a bad accelerator, backend or CPU affinity fails now, in this process,
    # instead of in every rank; and forked ranks inherit the loaded plugins and the detection
    # results. Before choosing how to start the ranks: a probe that hangs here rules out forking.
    select(
        init_options.get("accelerator"),
        init_options.get("backend"),
        registry=init_options.get("registry"),
    )
    registry = init_options.get("registry")
    resolve_mode(init_options.get("cpu_affinity"), registry.env if registry else os.environ)
    method = _start_method(start_method, fn)
    if "registry" in init_options and method != "fork":
        raise ConfigError(
            f"registry= reaches the ranks only with start_method='fork', not {method!r}; "
            f"a registry holds loaded plugin modules and cannot be pickled{_stuck_note()}"
        )
    context: Any = multiprocessing.get_context(method)
    if method == "fork":
        # Import torch once here rather than once per rank: forked ranks inherit it (16 ranks on
        # 2 cores start in about 1 s instead of 13 s). Importing torch initialises no device
        # runtime, so forking afterwards stays safe.
        import torch.distributed  # noqa: F401
    workdir = tempfile.mkdtemp(prefix="accelbackends-spawn-")  # mode 0700: this user only
    server = LocalStoreServer(os.path.join(workdir, "store.sock"))
    run_id = f"spawn-{os.getpid()}-{next(_runs)}"
    processes: dict[int, multiprocessing.process.BaseProcess] = {}
    connections: dict[Connection, int] = {}
    try:
        for rank in range(nprocs):
            cluster = ClusterInfo(
                launcher="spawn",
                rank=rank,
                world_size=nprocs,
                local_rank=rank,
                local_world_size=nprocs,
                node_rank=0,
                store_socket=server.path,
                run_id=run_id,
                sources=dict.fromkeys(
                    ("rank", "world_size", "local_rank", "local_world_size"), "spawn()"
                ),
            )
            receive, send = context.Pipe(duplex=False)
            process = context.Process(
                target=_child,
                args=(
                    fn,
                    tuple(args),
                    cluster,
                    init_options,
                    send,
                    os.getpid(),
                    server.fileno() if method == "fork" else -1,
                ),
                name=f"accelbackends-rank-{rank}",
            )
            process.start()
            send.close()
            processes[rank] = process
            connections[receive] = rank
        return _collect(processes, connections)
    finally:
        _stop(processes.values())
        for conn in connections:
            conn.close()
        server.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _collect(
    processes: dict[int, multiprocessing.process.BaseProcess],
    connections: dict[Connection, int],
) -> list[Any]:
    """Read every rank's report; on the first failure, stop waiting for the healthy ranks."""
    results: dict[int, Any] = {}
    failures: list[tuple[float, SpawnError]] = []
    pending = dict(connections)
    sentinels = {p.sentinel: rank for rank, p in processes.items()}
    settle_until: float | None = None
    while pending or sentinels:
        timeout = None if settle_until is None else max(0.0, settle_until - time.monotonic())
        ready_list = wait([*pending, *sentinels], timeout)
        if not ready_list:
            break  # the settling window after the first failure is over
        for ready in ready_list:
            if isinstance(ready, Connection) and ready in pending:
                rank = pending.pop(ready)
                try:
                    message = ready.recv()
                except EOFError:
                    continue
                if message[0] == "ok":
                    results[rank] = message[2]
                else:
                    _, rank, kind, text, trace, stamp = message
                    failures.append(
                        (
                            stamp,
                            SpawnError(
                                f"rank {rank} of {len(processes)} raised {kind}: {text}"
                                + (f"\n\nTraceback of rank {rank}:\n{trace}" if trace else ""),
                                rank=rank,
                                traceback=trace,
                            ),
                        )
                    )
            elif isinstance(ready, int) and ready in sentinels:
                rank = next(r for s_, r in sentinels.items() if s_ == ready)
                conn = next((c for c, r in pending.items() if r == rank), None)
                if conn is not None and conn.poll():
                    continue  # its report is waiting: read it first
                del sentinels[ready]
                if conn is not None:
                    del pending[conn]
                process = processes[rank]
                process.join()
                if rank not in results and not any(e.rank == rank for _, e in failures):
                    failures.append(
                        (
                            # A death is noticed a moment after it happened, and its peers'
                            # errors ("connection reset") follow it within that moment: date
                            # it back so that the death, the cause, is the one named.
                            time.monotonic() - DEATH_LEAD,
                            SpawnError(
                                f"rank {rank} of {len(processes)} "
                                f"{_exit_description(process.exitcode)} without reporting a result",
                                rank=rank,
                            ),
                        )
                    )
        if failures and settle_until is None:
            # Other ranks fail in turn once the first one is gone; give their reports a moment
            # to arrive so the earliest failure, the cause, is the one named.
            settle_until = time.monotonic() + SETTLE
    if failures:
        failures.sort(key=lambda item: item[0])
        first = failures[0][1]
        others = sorted({e.rank for _, e in failures[1:]} - {first.rank})
        if others:
            which = f"rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))}"
            first.args = (f"{first.args[0]}\n\n({which} failed after it)",)
        raise first
    return [results[rank] for rank in sorted(results)]


def _stop(processes: Any) -> None:
    """Terminate every rank still running (SIGTERM, then SIGKILL) and reap them all."""
    alive = [p for p in processes if p.is_alive()]
    for process in alive:
        process.terminate()
    deadline = time.monotonic() + TERMINATE_GRACE
    for process in alive:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()
    for process in processes:
        process.join()
