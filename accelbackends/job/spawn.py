"""``spawn(fn, nprocs)``: run ``fn(ctx, *args)`` in N local ranks, for single-node jobs, notebooks
and tests.

The ranks meet through torch's ``FileStore``, a file in a private (0700) directory: no port to
race for, nothing reachable from the network, and none of the DNS look-ups that make torch's TCP
store stall now and then; Gloo is kept on the loopback interface. Ranks are forked where that
is safe, which is what lets functions defined in a notebook cell or a script read from stdin run
(``torch.multiprocessing.spawn`` must pickle them by reference and cannot). If a rank fails, the
others are stopped at once and the parent raises
[`SpawnError`][accelbackends.SpawnError] naming the rank; no child outlives the call.

What a rank returns arrives whole and owned by the parent: each rank pickles its result itself
(with the standard pickler, so a tensor travels as its bytes instead of as a file descriptor to
shared memory that dies with the rank), and tensors on a device are copied to the CPU first. A
rank's exception stays catchable by its type: the `SpawnError` raised is also an instance of the
rank's exception class where that class can be combined with it (`except ValueError` catches a
rank's `ValueError`), with the rank and its traceback in the message.

Once a rank's function has returned, the parent waits for that rank to exit at most
`EXIT_GRACE` seconds (a non-daemon thread left running would keep it forever), then ends it,
and ends whatever it left behind: every rank leads its own process group, and on Linux the
parent adopts the processes a rank detached (a child subreaper), so helpers that outlive their
rank are stopped too.
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import math
import multiprocessing
import os
import pickle
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, NoReturn

from ..host import guard
from ..host.guard import stuck
from ..plugin.errors import ConfigError, SpawnError, describe, first_line
from ..plugin.types import ClusterInfo
from ..rendezvous.network import GLOO_INTERFACE, interface_towards
from .affinity import resolve_mode
from .environ import job_variables
from .failure import is_consequence, raised_at
from .processes import Adopter, end_state, is_stopped, private_temp_folder, stop
from .relay import StderrRelay
from .select import select

__all__ = ["spawn"]

# Importing this module sets ``spawn`` on ``accelbackends.job``, never on ``accelbackends``,
# whose ``spawn`` stays the function.

#: After the first failure, how long to wait for other ranks' reports to find the earliest one.
SETTLE = 0.5
#: How far back a rank that died without reporting is dated when failures are ordered.
DEATH_LEAD = 0.5
#: When every failure only says that a peer went away, how long to wait for a rank that is on
#: its way out to finish exiting, so that its exit status is the one named. A rank's sockets
#: close before its last descriptors: a CUDA rank's peers report "Connection closed by peer"
#: while its device's teardown still holds its exit (seen past `SETTLE` on an H200). Only a
#: teardown stuck in a driver reaches this bound.
DYING_WAIT = 30.0
#: When every failure only says that a peer went away, how long a rank that has neither
#: reported nor begun to exit may take to do one or the other: Gloo closes a pair's socket as
#: it raises, before that rank's process ends ("writev ... Bad address" on a GPU tensor aborted
#: rank 0 of two on an H200 after rank 1 had already reported losing it).
PEER_GRACE = 5.0
#: How often a rank on its way out is looked at while waiting for its end.
_DYING_POLL = 0.05
#: After a rank's function returned, how long the rank may take to exit before it is ended.
EXIT_GRACE = 5.0
_runs = itertools.count()
#: Rank exception classes combined with SpawnError, by original class (one class per type).
_combined: dict[type, type] = {}


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
        problem = _unimportable(fn)
        if problem is None:
            try:
                pickle.dumps(fn)
            except Exception as exc:
                problem = str(exc)
        if problem is not None:
            raise ConfigError(
                f"fn={getattr(fn, '__qualname__', fn)!r} cannot be pickled for "
                f"start_method={method!r} ({problem}); functions defined in a notebook or in a "
                "script read from stdin need start_method='fork', which is only safe before "
                "a device runtime (CUDA, XPU) was initialised in this process and while no "
                f"plugin call is stuck in it{_stuck_note()}"
            ) from None
    return method


def _unimportable(fn: Callable[..., Any]) -> str | None:
    """Why a new interpreter could not find ``fn`` although pickle accepts it by reference:
    it lives in a ``__main__`` that is not a file (stdin, ``python -c``, a notebook)."""
    if getattr(fn, "__module__", None) != "__main__":
        return None
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if path and os.path.isfile(path):
        return None
    return "it is defined in __main__, which a new interpreter cannot import"


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


@functools.cache
def _loopback() -> str | None:
    """The loopback interface's name; asked once in the parent, so forked ranks inherit it."""
    return interface_towards("127.0.0.1")


def _child(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    cluster: ClusterInfo,
    init_options: dict[str, Any],
    conn: Connection,
    parent: int,
    stderr: Connection | None = None,
) -> None:
    from .lifecycle import destroy, init

    _become_rank(cluster, parent, stderr)
    try:
        ctx = init(cluster=cluster, **init_options)
        result = fn(ctx, *args)
    except BaseException as exc:
        # Report before tearing down: the teardown makes the other ranks fail too, and the
        # parent names the rank whose failure came first.
        _send_and_close(conn, _raised(cluster.rank, exc))
        destroy()
        _leave(1)
    destroy()
    try:
        payload = _dumps(result)
    except Exception as exc:  # an unpicklable result
        _send_and_close(conn, _unsendable(cluster.rank, result, exc))
        _leave(1)
    try:
        conn.send(("ok", cluster.rank, None))
        conn.send_bytes(payload)
    finally:
        conn.close()
    if stuck():
        _leave(0)


def _become_rank(cluster: ClusterInfo, parent: int, stderr: Connection | None) -> None:
    """Make this process a rank of its own: its stderr into the parent's relay, its own process
    group, the parent's signals, and the job's variables."""
    if stderr is not None:
        # fd 2 itself, so that what C libraries write (an abort's message) is relayed too.
        sys.stderr.flush()
        os.dup2(stderr.fileno(), 2)
        stderr.close()
    # Lead a process group of our own: whatever this rank starts and leaves behind can be
    # ended with it.
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    # The parent stops ranks with SIGTERM: die by it, whatever handler the parent installed.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops us
    _watch_parent(parent)
    # Libraries that read the env:// variables see the same job as accelbackends does.
    os.environ.update(job_variables(cluster))
    # All ranks are on this host: keep Gloo's connections on the loopback interface, off the
    # network, and independent of whether this host's name resolves.
    loopback = _loopback()
    if loopback and GLOO_INTERFACE not in os.environ:
        os.environ[GLOO_INTERFACE] = loopback


def _raised(rank: int, exc: BaseException) -> tuple[Any, ...]:
    """The report of a rank whose function (or init) raised ``exc``."""
    return (
        "error",
        rank,
        type(exc).__name__,
        str(exc),
        traceback.format_exc(),
        raised_at(exc),
        _class_reference(type(exc)),
    )


def _unsendable(rank: int, result: Any, exc: Exception) -> tuple[Any, ...]:
    """The report of a rank whose return value cannot be pickled."""
    return (
        "error",
        rank,
        "",
        f"returned a {_type_name(result)} that cannot be sent back to the parent "
        f"({describe(exc)}); return plain data, tensors or arrays",
        "",
        time.monotonic(),
        None,
    )


def _send_and_close(conn: Connection, message: tuple[Any, ...]) -> None:
    conn.send(message)
    conn.close()


def _leave(code: int) -> NoReturn:
    """A rank's exit. Where a thread given up on still runs (a plugin call, check's heartbeat
    past its wait), the interpreter's shutdown could abort in it, so `guard.leave`
    skips that shutdown (a rank started with ``start_method="spawn"`` goes through it; a forked
    one leaves with ``os._exit`` anyway); otherwise the user's atexit callbacks run as usual."""
    if stuck():
        guard.leave(code)
    sys.exit(code)


def _type_name(value: object) -> str:
    kind = type(value)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def _dumps(result: Any) -> bytes:
    """``result`` as bytes the parent owns: the standard pickler copies a tensor's data (the
    multiprocessing one would send a file descriptor to memory that goes with this process),
    and a tensor on a device is copied to the CPU first, so that unpickling never touches the
    parent's device runtime."""
    buffer = io.BytesIO()
    _ResultPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(result)
    return buffer.getvalue()


class _ResultPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor) and obj.device.type != "cpu":
            return obj.detach().cpu().__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        return NotImplemented


def _class_reference(kind: type) -> bytes | None:
    """The exception class pickled by reference, where the parent can find it again."""
    try:
        return pickle.dumps(kind)
    except Exception:
        return None


def _rank_error(message: str, rank: int, trace: str, reference: bytes | None) -> SpawnError:
    """A `SpawnError` that is also an instance of the rank's exception class, where the
    two combine (``except ValueError`` then catches a rank's ``ValueError``)."""
    original: Any = None
    if reference is not None:
        with contextlib.suppress(Exception):
            original = pickle.loads(reference)
    if (
        isinstance(original, type)
        and issubclass(original, Exception)
        and not issubclass(original, SpawnError)
    ):
        combined = _combined.get(original)
        if combined is None:
            with contextlib.suppress(TypeError):
                combined = type(
                    "SpawnError", (SpawnError, original), {"__module__": SpawnError.__module__}
                )
                _combined[original] = combined
        if combined is not None:
            with contextlib.suppress(Exception):
                error = combined(message, rank=rank, traceback=trace)
                error.args = (message,)
                return error  # type: ignore[no-any-return]
    return SpawnError(message, rank=rank, traceback=trace)


def _cause(
    failures: list[tuple[float, SpawnError]],
    processes: dict[int, multiprocessing.process.BaseProcess],
    total: int,
) -> SpawnError:
    """The error to raise: a rank's own failure before any that only says a peer went away
    (each in the order they were raised), or a rank stopped by a signal when every failure is
    such a consequence; the other ranks are mentioned as consequences."""
    failures.sort(key=lambda item: (is_consequence(_first_line(item[1])), item[0]))
    first = failures[0][1]
    stopped = [r for r, p in processes.items() if r != first.rank and is_stopped(p.pid)]
    notes = []
    if stopped and is_consequence(_first_line(first)):
        # Nothing failed of itself: a stopped rank stopped answering (SIGSTOP, Ctrl-Z, a
        # debugger), and its peers lost it.
        label = "ranks" if len(stopped) > 1 else "rank"
        cause = SpawnError(
            f"{label} {', '.join(map(str, stopped))} of {total} stopped answering: "
            f"{'they were' if len(stopped) > 1 else 'it was'} stopped by a signal (SIGSTOP, "
            f"Ctrl-Z, a debugger)",
            rank=stopped[0],
        )
        notes.append(f"as a consequence, {_first_line(first)}")
        first, stopped = cause, []
    if first.death:
        # A death is the cause of every "peer went away" that followed it: say each as such.
        first.consequences = tuple(
            (e.rank, _consequence_text(e, total))
            for _, e in failures
            if e.rank != first.rank and is_consequence(_first_line(e))
        )
        notes += [
            f"{text} — a consequence of rank {first.rank}'s death above"
            for _, text in first.consequences
        ]
    explained = {rank for rank, _ in first.consequences}
    others = sorted({e.rank for _, e in failures} - {first.rank} - explained)
    if others:
        notes.append(
            f"{'ranks' if len(others) > 1 else 'rank'} {', '.join(map(str, others))} "
            "failed after it, as a consequence"
        )
    if stopped:
        notes.append(
            f"{'ranks' if len(stopped) > 1 else 'rank'} {', '.join(map(str, stopped))} "
            "had been stopped by a signal (SIGSTOP, Ctrl-Z) and was not answering"
        )
    if notes:
        first.args = (f"{first.args[0]}\n\n({'; '.join(notes)})",)
    return first


def _consequence_text(error: SpawnError, total: int) -> str:
    """What a rank said, in its own words where they name it (``rank 1 lost contact with the
    other ranks ...``), else ``rank 1 raised RuntimeError: Connection closed by peer``."""
    line = _first_line(error)
    prefix = f"rank {error.rank} of {total} raised "
    if not line.startswith(prefix):
        return line
    said = line[len(prefix) :]
    _, colon, text = said.partition(": ")
    if colon and text.startswith(f"rank {error.rank} "):
        return text
    return f"rank {error.rank} raised {said}"


def _first_line(error: BaseException) -> str:
    text = str(error.args[0]) if error.args else str(error)
    return first_line(RuntimeError(text)) if text.strip() else ""


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
        The return values of ``fn``, indexed by rank, owned by this process: tensors arrive
        whole (a tensor on a device is copied to the CPU by its rank), as do numpy arrays and
        containers of them.

    Raises:
        SpawnError: A rank raised or died; names the rank and carries its message and
            traceback. Where a rank raised, the error is also an instance of that exception's
            class (`except ValueError` catches a rank's `ValueError`), unless the class cannot
            be found in this process or combined with `SpawnError`.
    """
    _check_arguments(fn, nprocs, args, init_options)
    context = multiprocessing.get_context(_prepare(fn, start_method, init_options))
    # mode 0700: this user only, so no other user can open the store file; the process id in
    # the name lets a later run remove it if this process is killed before its own cleanup runs.
    workdir = private_temp_folder("spawn", "store")
    adopter = Adopter()
    run_id = f"spawn-{os.getpid()}-{next(_runs)}"
    processes: dict[int, multiprocessing.process.BaseProcess] = {}
    connections: dict[Connection, int] = {}
    relay = StderrRelay()
    try:
        for rank in range(nprocs):
            cluster = _cluster(rank, nprocs, os.path.join(workdir, "store"), run_id)
            connection, processes[rank] = _start_rank(
                context, relay, cluster, fn, tuple(args), init_options
            )
            connections[connection] = rank
        relay.start()
        return _Collector(processes, connections, relay).collect()
    finally:
        stop(processes.values())
        adopter.end({p.pid for p in processes.values() if p.pid is not None})
        relay.close()
        for conn in connections:
            conn.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _check_arguments(
    fn: Callable[..., Any], nprocs: int, args: Sequence[Any], init_options: dict[str, Any]
) -> None:
    if not callable(fn):
        raise ConfigError(f"fn={fn!r} is not callable; pass the function each rank runs")
    if not isinstance(nprocs, int) or isinstance(nprocs, bool) or nprocs < 1:
        raise ConfigError(f"nprocs={nprocs!r} is not valid; use an integer >= 1")
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise ConfigError(f"args={args!r} is not valid; pass a tuple of arguments for fn")
    if "cluster" in init_options:
        raise ConfigError("spawn() describes the cluster itself; do not pass cluster=")


def _prepare(fn: Callable[..., Any], start_method: str | None, init_options: dict[str, Any]) -> str:
    """Select, check the options and choose how to start the ranks; returns the start method."""
    # Select here, once: a bad accelerator, backend or CPU affinity fails now, in this process,
    # instead of in every rank; and forked ranks inherit the loaded plugins and the detection
    # results. Before choosing how to start the ranks: a probe that hangs here rules out forking.
    registry = init_options.get("registry")
    select(init_options.get("accelerator"), init_options.get("backend"), registry=registry)
    resolve_mode(init_options.get("cpu_affinity"), registry.env if registry else os.environ)
    method = _start_method(start_method, fn)
    if "registry" in init_options and method != "fork":
        raise ConfigError(
            f"registry= reaches the ranks only with start_method='fork', not {method!r}; "
            f"a registry holds loaded plugin modules and cannot be pickled{_stuck_note()}"
        )
    if method == "fork":
        # Import torch once here rather than once per rank: forked ranks inherit it (16 ranks on
        # 2 cores start in about 1 s instead of 13 s). Importing torch initialises no device
        # runtime, so forking afterwards stays safe.
        from ..host.torchload import import_torch_distributed

        import_torch_distributed()

        # Asked once here rather than in every rank (1-2 ms each on 2 cores).
        _loopback()
    return method


def _cluster(rank: int, nprocs: int, store_file: str, run_id: str) -> ClusterInfo:
    return ClusterInfo(
        launcher="spawn",
        rank=rank,
        world_size=nprocs,
        local_rank=rank,
        local_world_size=nprocs,
        node_rank=0,
        store_socket=store_file,
        run_id=run_id,
        sources=dict.fromkeys(("rank", "world_size", "local_rank", "local_world_size"), "spawn()"),
    )


def _start_rank(
    context: Any,
    relay: StderrRelay,
    cluster: ClusterInfo,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    init_options: dict[str, Any],
) -> tuple[Connection, multiprocessing.process.BaseProcess]:
    """Start one rank; returns the end its report arrives on, and its process. Its stderr goes
    through a pipe of its own into ``relay``."""
    receive, send = context.Pipe(duplex=False)
    err_read, err_write = context.Pipe(duplex=False)
    try:
        process = context.Process(
            target=_child,
            args=(fn, args, cluster, init_options, send, os.getpid(), err_write),
            name=f"accelbackends-rank-{cluster.rank}",
        )
        process.start()
    except BaseException:
        for end in (receive, err_read):
            end.close()
        raise
    finally:
        send.close()
        err_write.close()
    relay.add(cluster.rank, os.dup(err_read.fileno()))
    err_read.close()
    return receive, process


class _Collector:
    """Reads every rank's report; on the first failure, stops waiting for the healthy ranks."""

    def __init__(
        self,
        processes: dict[int, multiprocessing.process.BaseProcess],
        connections: dict[Connection, int],
        relay: StderrRelay,
    ) -> None:
        self.processes = processes
        self.relay = relay
        self.results: dict[int, Any] = {}
        self.failures: list[tuple[float, SpawnError]] = []
        self.pending = dict(connections)
        self.sentinels = {p.sentinel: rank for rank, p in processes.items()}
        #: When each rank that reported its result must have exited by (see EXIT_GRACE).
        self.exit_by: dict[int, float] = {}
        self.settle_until: float | None = None
        self.dying_until = math.inf
        self.total = len(processes)

    def collect(self) -> list[Any]:
        while self.pending or self.sentinels:
            ready_list = wait([*self.pending, *self.sentinels], self._timeout())
            if not ready_list:
                if self._quiet():
                    break  # the settling window after the first failure is over
                continue
            for ready in ready_list:
                if isinstance(ready, Connection) and ready in self.pending:
                    self._read(ready)
                elif isinstance(ready, int) and ready in self.sentinels:
                    self._ended(ready)
            if self.failures and self.settle_until is None:
                # Other ranks fail in turn once the first one is gone; give their reports a
                # moment to arrive so the earliest failure, the cause, is the one named.
                self.settle_until = time.monotonic() + SETTLE
                self.dying_until = time.monotonic() + DYING_WAIT
        if self.failures:
            raise _cause(self.failures, self.processes, self.total)
        return [self.results[rank] for rank in sorted(self.results)]

    def _timeout(self) -> float | None:
        deadlines = [d for r, d in self.exit_by.items() if r in self.sentinels.values()]
        if self.settle_until is not None:
            deadlines.append(self.settle_until)
        return None if not deadlines else max(0.0, min(deadlines) - time.monotonic())

    def _quiet(self) -> bool:
        """Nothing arrived before the next deadline: whether to stop collecting."""
        if self.settle_until is not None and time.monotonic() >= self.settle_until:
            if _await_ends(self):
                self.settle_until = time.monotonic() + _DYING_POLL
                return False
            return True
        # A rank returned but does not exit (a thread it left running, a helper holding its
        # exit pipe): stop waiting for it; stop() ends it and what it left behind.
        now = time.monotonic()
        for sentinel, rank in list(self.sentinels.items()):
            if self.exit_by.get(rank, math.inf) <= now:
                del self.sentinels[sentinel]
        return False

    def _read(self, ready: Connection) -> None:
        rank = self.pending.pop(ready)
        try:
            message = ready.recv()
            payload = ready.recv_bytes() if message[0] == "ok" else b""
        except EOFError:
            return
        if message[0] != "ok":
            self.failures.append(_reported_failure(message, self.total))
            return
        self.exit_by[rank] = time.monotonic() + EXIT_GRACE
        try:
            self.results[rank] = pickle.loads(payload)
        except Exception as exc:
            error = SpawnError(
                f"rank {rank} of {self.total}: its return value cannot be unpickled in the "
                f"parent ({describe(exc)})",
                rank=rank,
            )
            self.failures.append((time.monotonic(), error))

    def _ended(self, sentinel: int) -> None:
        rank = self.sentinels[sentinel]
        conn = self.connection(rank)
        if conn is not None and conn.poll():
            return  # its report is waiting: read it first
        del self.sentinels[sentinel]
        if conn is not None:
            del self.pending[conn]
        self.died(rank)

    def connection(self, rank: int) -> Connection | None:
        return next((c for c, r in self.pending.items() if r == rank), None)

    def accounted(self, rank: int) -> bool:
        """Whether ``rank`` returned or its failure is already recorded."""
        return rank in self.results or any(e.rank == rank for _, e in self.failures)

    def died(self, rank: int, how: str = "") -> None:
        """Record that ``rank`` ended without reporting (reaped here, where it has ended), with
        its last stderr lines."""
        process = self.processes[rank]
        if not how:
            process.join()
        if self.accounted(rank):
            return
        how = how or _exit_description(process.exitcode)
        last = self.relay.last_lines(rank)
        said = f"; its last stderr lines: {' | '.join(last)}" if last else ""
        error = SpawnError(
            f"rank {rank} of {self.total} {how} without reporting a result{said}",
            rank=rank,
            death=how,
            exitcode=process.exitcode,
            last_stderr=last,
        )
        # A death is noticed a moment after it happened, and its peers' errors ("connection
        # reset") follow it within that moment: date it back so that the death, the cause, is
        # the one named.
        self.failures.append((time.monotonic() - DEATH_LEAD, error))


def _reported_failure(message: tuple[Any, ...], total: int) -> tuple[float, SpawnError]:
    """A rank's own report of its failure, dated when it was raised."""
    _, rank, kind, text, trace, stamp, reference = message
    said = f"raised {kind}: {text}" if kind else text
    where = f"\n\nTraceback of rank {rank}:\n{trace}" if trace else ""
    return stamp, _rank_error(f"rank {rank} of {total} {said}{where}", rank, trace, reference)


def _await_ends(collector: _Collector) -> bool:
    """At the end of the settling window: whether to go on waiting, because every failure so
    far only says that a peer went away and a rank that has not reported is on its way out.

    That rank is the cause, and its exit status must be named, not raced: a rank whose sockets
    closed (its peers' reports are in) may still be closing its other descriptors, its exit
    pipe among them (a device's teardown; a helper it forked holding a copy). One that has
    ended is reaped and recorded here without waiting for that pipe; one still exiting is
    waited for up to `DYING_WAIT` after the first failure, then named as such; one still
    running, for up to `PEER_GRACE` (its report, or its end, may be on the way).
    """
    if not all(is_consequence(_first_line(e)) for _, e in collector.failures):
        return False
    waiting = False
    dying_until = collector.dying_until
    for sentinel, rank in list(collector.sentinels.items()):
        if any(e.rank == rank for _, e in collector.failures):
            continue  # it reported; its own exit says nothing more
        state = end_state(collector.processes[rank].pid)
        conn = collector.connection(rank)
        if state == "ended" and (conn is None or not conn.poll()):
            del collector.sentinels[sentinel]
            if conn is not None:
                del collector.pending[conn]
            collector.died(rank)
            waiting = True  # the loop ends at its next look, with the death in hand
        elif state == "ending" or state == "ended":  # ending, or its report is still to read
            if time.monotonic() < dying_until:
                waiting = True
            else:
                collector.died(rank, f"was still exiting {DYING_WAIT:g} s after the first failure")
        elif time.monotonic() < dying_until - DYING_WAIT + PEER_GRACE:
            waiting = True  # still running: its own report or its end may be on the way
    return waiting
