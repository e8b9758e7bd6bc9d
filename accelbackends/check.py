"""``accelbackends check``: prove that the ranks can talk over the chosen backend, and how fast.

Standalone it starts ``--nproc`` local ranks through :func:`accelbackends.spawn`; under a launcher
(torchrun, SLURM, MPI, plain ``env://`` variables) it joins the ranks the launcher started. Either
way every rank runs the same four steps and rank 0 reports them:

1. the environment: accelerator, backend and why, world and local sizes;
2. init through the full path (detect, select, bind, rendezvous, ``init_process_group``), timed;
3. correctness: each collective on float32, bfloat16 and int64 at odd and non-power-of-two
   lengths, compared with values every rank computes itself; the per-rank verdicts are gathered
   so that rank 0 names the failing check *and* rank;
4. bandwidth: all_reduce and all_gather swept over sizes; time is the slowest rank's mean,
   algbw = bytes / time, busbw by the nccl-tests definitions.

The traffic that organises the run (verdicts, timings, agreeing whether to go on) travels over a
separate Gloo group where the backend under test is not Gloo, so a backend that corrupts data
cannot corrupt its own report. Exit 0 when every check passed (skips allowed), 1 when one failed
or a rank died, 2 for bad input. torch is imported inside functions only: the CLI imports this
module to build its parser, and ``accelbackends info`` must not pay for torch.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from . import config
from .errors import AccelBackendsError, ConfigError, SpawnError, describe, first_line

if TYPE_CHECKING:
    from .lifecycle import Context
    from .selection import Selection
    from .spec import ClusterInfo

__all__ = [
    "DTYPES",
    "GIB",
    "KIB",
    "LENGTHS",
    "MIB",
    "OPS",
    "Measurement",
    "add_arguments",
    "bus_bandwidth",
    "format_size",
    "measure",
    "parse_size",
    "run",
    "synchronize",
]

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
DEFAULT_TIMEOUT = 60.0
MIN_RENDEZVOUS_TIMEOUT = 30.0
DEFAULT_WARMUP = 2
DEFAULT_MIN_BYTES = 1 * KIB
DEFAULT_MAX_BYTES_CPU = 64 * MIB
DEFAULT_MAX_BYTES_ACCELERATOR = 1 * GIB
#: Automatic iterations aim at this much timed work per size, within the bounds below; the
#: estimate is the slowest rank's fastest warm-up call.
AUTO_SECONDS_PER_SIZE = 0.1
AUTO_MIN_ITERS, AUTO_MAX_ITERS = 5, 200
#: The watchdog stops a rank whose step outlives ``--timeout`` by half as much again (2 to 10 s):
#: the backend's own collective timeout, whose message says more, gets the first chance.
WATCHDOG_GRACE = (2.0, 10.0)
#: How long a rank that lost contact with the others waits before it fails (see _lost_contact).
LOST_CONTACT_DELAY = 2.0

#: Element counts of the correctness checks: odd, non-power-of-two, one above a power of two.
LENGTHS = (1, 7, 1000, 4099, 65537)
DTYPES = ("float32", "bfloat16", "int64")
#: The swept operations and their nccl-tests bus-bandwidth factor for n ranks.
OPS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
}
_REDUCTIONS = ("sum", "max", "min", "avg")
#: Unit roundoff of the floating dtypes: a sum of n inputs rounds at most n - 1 times, an
#: average once more.
_ROUNDOFF = {"float32": 2.0**-24, "bfloat16": 2.0**-8}
_SENTINEL = 100  # never produced by _pattern, exact in every dtype checked
_UNSUPPORTED = re.compile(
    r"not supported|unsupported|does not support|not implemented|no support", re.IGNORECASE
)
#: C++ errors start with the source location of the build machine: noise for a user.
_SOURCE_LOCATION = re.compile(r"\[[^\]\s]*\.(?:c|cc|cpp|cu|h|hpp):\d+\]\s*")

# -- flags ---------------------------------------------------------------------------------------

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:([kmgt])(?:i?b)?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": KIB, "m": MIB, "g": GIB, "t": 1 << 40}
_SIZE_HINT = "use a byte count such as 4096, 64KiB, 1MiB or 1GiB (units are powers of 1024)"


def parse_size(text: str) -> int:
    """``"64KiB"``, ``"64K"``, ``"1.5MiB"`` or ``"4096"`` as a number of bytes (>= 1).

    Units are binary, as in nccl-tests: K = KB = KiB = 1024 bytes.
    """
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; {_SIZE_HINT}")
    value = float(match.group(1)) * _UNITS[(match.group(2) or "").lower()]
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number of bytes >= 1; {_SIZE_HINT}"
        )
    return int(value)


def format_size(nbytes: int) -> str:
    """``1024`` → ``1 KiB``; a size that is not a whole number of units keeps one decimal."""
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if nbytes >= unit:
            value = nbytes / unit
            return f"{value:.0f} {name}" if value == int(value) else f"{value:.1f} {name}"
    return f"{nbytes} B"


def _integer(low: int) -> Callable[[str], int]:
    def integer(text: str) -> int:
        if not re.fullmatch(r"\s*[+-]?\d+\s*", text) or int(text) < low:
            raise argparse.ArgumentTypeError(f"{text!r} is not valid; use an integer >= {low}")
        return int(text)

    return integer


def _seconds(text: str) -> float:
    try:
        return config.parse_seconds(text, source="--timeout")
    except ConfigError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not valid; use a positive number of seconds such as 60"
        ) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``check`` subcommand's flags."""
    parser.description = (
        "Start --nproc local ranks (or join the ranks a launcher such as torchrun started), "
        "verify the collectives and measure bandwidth. Exit 0: every check passed; 1: a check "
        "failed or a rank died; 2: bad input."
    )
    parser.add_argument(
        "--nproc",
        type=_integer(1),
        metavar="N",
        help="local ranks to start (default: the accelerator's device count; 2 on CPU); "
        "not used under a launcher, which decides",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--min-bytes",
        type=parse_size,
        default=DEFAULT_MIN_BYTES,
        metavar="SIZE",
        help="smallest bandwidth size (default 1KiB); sizes double up to --max-bytes",
    )
    parser.add_argument(
        "--max-bytes",
        type=parse_size,
        metavar="SIZE",
        help="largest bandwidth size (default 64MiB on CPU, 1GiB on accelerators)",
    )
    parser.add_argument(
        "--iters",
        type=_integer(1),
        metavar="N",
        help=f"timed iterations per size (default: automatic, about {AUTO_SECONDS_PER_SIZE:g} s "
        f"per size, {AUTO_MIN_ITERS} to {AUTO_MAX_ITERS})",
    )
    parser.add_argument(
        "--warmup",
        type=_integer(0),
        default=DEFAULT_WARMUP,
        metavar="N",
        help=f"untimed iterations before each size (default {DEFAULT_WARMUP})",
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="limit of each step, also the collective timeout and (at least "
        f"{MIN_RENDEZVOUS_TIMEOUT:g} s) the rendezvous timeout (default: {config.TIMEOUT}, "
        f"else {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw busbw against size into this .png, .svg or .pdf file (needs matplotlib)",
    )


@dataclass(frozen=True)
class _Options:
    """The validated flags, as every rank receives them."""

    min_bytes: int
    max_bytes: int | None  # None: the default for the device type
    iters: int | None  # None: automatic
    warmup: int
    timeout: float
    #: None: ACCELBACKENDS_RENDEZVOUS_TIMEOUT decides (read by init()).
    rendezvous_timeout: float | None
    json: bool
    plot: str | None

    def sizes(self, device_type: str) -> list[int]:
        """The swept sizes: --min-bytes, doubling while <= --max-bytes."""
        top = self.max_bytes or _default_max_bytes(device_type)
        sizes, size = [], self.min_bytes
        while size <= top:
            sizes.append(size)
            size *= 2
        return sizes


def _default_max_bytes(device_type: str) -> int:
    return DEFAULT_MAX_BYTES_CPU if device_type == "cpu" else DEFAULT_MAX_BYTES_ACCELERATOR


def _options(args: argparse.Namespace, env: Any) -> _Options:
    if args.max_bytes is not None and args.min_bytes > args.max_bytes:
        raise ConfigError(
            f"--min-bytes={format_size(args.min_bytes)} is larger than "
            f"--max-bytes={format_size(args.max_bytes)}; use --min-bytes <= --max-bytes"
        )
    timeout = args.timeout or config.read_seconds(env, config.TIMEOUT) or DEFAULT_TIMEOUT
    # Ranks may start slowly on a busy node: joining gets at least MIN_RENDEZVOUS_TIMEOUT,
    # unless the rendezvous variable sets its own limit.
    rendezvous: float | None = max(timeout, MIN_RENDEZVOUS_TIMEOUT)
    if config.read_seconds(env, config.RENDEZVOUS_TIMEOUT) is not None:
        rendezvous = None
    if args.plot is not None:
        _check_plot_target(args.plot)
    return _Options(
        min_bytes=args.min_bytes,
        max_bytes=args.max_bytes,
        iters=args.iters,
        warmup=args.warmup,
        timeout=timeout,
        rendezvous_timeout=rendezvous,
        json=args.json,
        plot=args.plot,
    )


def _check_plot_target(target: str) -> None:
    path = Path(target)
    if path.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ConfigError(f"--plot={target}: unsupported file type; use a .png, .svg or .pdf path")
    if not path.parent.is_dir():
        raise ConfigError(f"--plot={target}: directory {str(path.parent)!r} does not exist")
    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError(
            f"--plot={target} needs matplotlib, which is not installed; "
            "install it with: pip install matplotlib"
        )


def _check_memory(options: _Options, device_type: str, local_ranks: int) -> None:
    """On CPU every local rank keeps its buffers in this node's memory: refuse a sweep that
    cannot fit rather than have the kernel kill a rank halfway through."""
    if device_type != "cpu":
        return
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return
    top = options.max_bytes or _default_max_bytes(device_type)
    need = 2 * top * local_ranks  # all_gather holds its output and its share of the input
    if need > physical // 2:
        raise ConfigError(
            f"--max-bytes={format_size(top)} needs about {format_size(need)} across "
            f"{local_ranks} local ranks, more than half of this node's {format_size(physical)}; "
            "use a smaller --max-bytes"
        )


# -- the command ---------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    """``accelbackends check``; returns the exit code, raises errors for the CLI to report."""
    from .registry import default_registry
    from .selection import select

    registry = default_registry()
    options = _options(args, registry.env)
    # The whole selection is validated here, before any rank starts: a wrong override is exit 2
    # with one line, not one traceback per rank.
    selection = select(registry=registry)
    cluster = registry.cluster_environment()
    device_type = selection.spec.device_type
    if cluster.launcher != "single":
        if args.nproc is not None:
            raise ConfigError(
                f"--nproc={args.nproc} cannot be used under {cluster.launcher}, which started "
                f"{cluster.world_size} {_plural(cluster.world_size, 'rank')}; the launcher "
                "decides how many ranks run"
            )
        _check_memory(options, device_type, cluster.local_world_size)
        return _join_launcher(options, selection, cluster)
    nproc = args.nproc or _default_nproc(selection)
    _check_memory(options, device_type, nproc)
    return _standalone(options, selection, nproc)


def _default_nproc(selection: Selection) -> int:
    if selection.spec.device_type == "cpu":
        return 2
    return max(1, selection.status.detection.device_count)


def _standalone(options: _Options, selection: Selection, nproc: int) -> int:
    from .spawn import spawn

    if not options.json:
        _say(_environment(selection, nproc, nproc, "spawn"))
    sys.stdout.flush()  # the ranks are forked: anything still buffered would be printed twice
    started = time.time()
    try:
        results = spawn(
            _rank_main,
            nproc,
            args=(options, started, "start, "),
            timeout=options.timeout,
            rendezvous_timeout=options.rendezvous_timeout,
        )
    except SpawnError as exc:
        if options.json:
            _print_json(_error_report(selection, nproc, exc))
        raise AccelBackendsError(_first_line(exc)) from exc
    return _finish(results[0], options)


def _join_launcher(options: _Options, selection: Selection, cluster: ClusterInfo) -> int:
    from .lifecycle import distributed

    if cluster.rank == 0 and not options.json:
        _say(
            _environment(selection, cluster.world_size, cluster.local_world_size, cluster.launcher)
        )
    started = time.time()
    with distributed(timeout=options.timeout, rendezvous_timeout=options.rendezvous_timeout) as ctx:
        report = _rank_main(ctx, options, started, "")
    if ctx.rank != 0:
        return 0 if report["ok"] else 1
    return _finish(report, options)


def _environment(selection: Selection, world_size: int, local_size: int, launcher: str) -> str:
    nodes = max(1, world_size // max(1, local_size))
    return (
        f"[1/4] environment: {selection.accelerator} with {selection.backend}, {world_size} "
        f"{_plural(world_size, 'rank')} ({local_size} per node, {nodes} "
        f"{_plural(nodes, 'node')}), launcher {launcher}\n"
        f"      {selection.accelerator}: {selection.reason}; "
        f"{selection.backend}: {selection.backend_reason}"
    )


def _finish(report: dict[str, Any], options: _Options) -> int:
    if options.plot:
        _plot(Path(options.plot), report)
    if options.json:
        _print_json(report)
    else:
        _say(_verdict(report))
        if options.plot:
            _say(f"plot: busbw against size written to {options.plot}")
    return 0 if report["ok"] else 1


def _error_report(selection: Selection, nproc: int, exc: SpawnError) -> dict[str, Any]:
    """What ``--json`` prints when a rank died: the same keys, and the error."""
    return {
        "ok": False,
        "world_size": nproc,
        "accelerator": selection.accelerator,
        "backend": selection.backend,
        "init_seconds": None,
        "checks": [],
        "bandwidth": [],
        "error": _first_line(exc),
    }


def _print_json(report: dict[str, Any]) -> None:
    _say(json.dumps(report, indent=2))


def _say(line: str) -> None:
    try:
        print(line, flush=True)
    except BrokenPipeError:
        # The reader went away (``check | head``): finish quietly; the exit status still tells.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - replaces stdout for good


def _plural(count: int, word: str) -> str:
    return word if count == 1 else word + "s"


def _first_line(exc: BaseException) -> str:
    return _SOURCE_LOCATION.sub("", first_line(exc))


def _describe(exc: BaseException) -> str:
    return _SOURCE_LOCATION.sub("", describe(exc))


def _is_unsupported(exc: Exception) -> bool:
    """Whether the backend says it does not implement the call, rather than failing it."""
    return isinstance(exc, NotImplementedError) or bool(_UNSUPPORTED.search(str(exc)))


# -- what every rank runs ------------------------------------------------------------------------


@dataclass
class _Result:
    """One check's verdict: per rank while running, merged over the ranks for the report."""

    name: str
    status: str  # "passed", "skipped", "failed" or "not run" (which counts as failed)
    detail: str = ""
    ranks: list[int] = field(default_factory=list)  # where it failed

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.status in ("passed", "skipped"),
            "skipped": self.status == "skipped",
            "detail": self.detail,
            "ranks": self.ranks,
        }


@dataclass
class _Rank:
    """One rank's run: its context, its control group, its watchdog, and whether to go on."""

    ctx: Context
    options: _Options
    control: Any  # the process group for the run's own traffic (None: the default group)
    watchdog: _Watchdog
    #: Set when the ranks may no longer agree on the next collective (a call raised on some
    #: ranks only, or ran into the timeout): nothing more is sent over the backend under test.
    stopped: str = ""

    def say(self, text: str) -> None:
        if self.ctx.rank == 0 and not self.options.json:
            _say(text)


def _rank_main(ctx: Context, options: _Options, started: float, init_span: str) -> dict[str, Any]:
    """One rank's whole run. Returns the report, the same on every rank; rank 0 prints it."""
    low, high = WATCHDOG_GRACE
    watchdog = _Watchdog(ctx.rank, options.timeout, min(high, max(low, options.timeout / 2)))
    try:
        with watchdog.step("creating the control group"):
            rank = _Rank(ctx, options, _control_group(ctx, options.timeout), watchdog)
        with watchdog.step("measuring the time to initialise"):
            init_seconds = _max_over_ranks(ctx, rank.control, [time.time() - started])[0]
        rank.say(
            f"[2/4] init: {ctx.world_size} {_plural(ctx.world_size, 'rank')} ready in "
            f"{init_seconds:.2f} s ({init_span}detect, select, bind, rendezvous, "
            "init_process_group; slowest rank)"
        )
        checks = _correctness(rank)
        bandwidth, problems = _bandwidth(rank)
        checks += _gather(rank, problems, "bandwidth")
    finally:
        watchdog.stop()
    return {
        "ok": all(c.status in ("passed", "skipped") for c in checks),
        "world_size": ctx.world_size,
        "local_world_size": ctx.local_world_size,
        "accelerator": ctx.accelerator,
        "backend": ctx.backend,
        "reason": ctx.reason,
        "launcher": ctx.launcher,
        "init_seconds": round(init_seconds, 4),
        "timeout": options.timeout,
        "checks": [c.as_json() for c in checks],
        "bandwidth": [m.as_json() for m in bandwidth],
    }


def _control_group(ctx: Context, timeout: float) -> Any:
    """A Gloo group for the run's own traffic where the backend under test is something else.

    Its timeout is twice the collective timeout: a rank whose call failed at once waits here
    while another rank's call still runs into the backend's timeout.
    """
    from datetime import timedelta

    import torch.distributed as dist

    if ctx.backend == "gloo" or not dist.is_gloo_available():
        return None
    return dist.new_group(backend="gloo", timeout=timedelta(seconds=2 * timeout))


class _Watchdog:
    """Ends this rank when a step outlives its limit, so that no run hangs.

    One line on stderr names the rank and the step, then the process exits with status 1;
    spawn() or the launcher then stops the other ranks.
    """

    def __init__(self, rank: int, timeout: float, grace: float) -> None:
        self._rank = rank
        self._timeout, self._grace = timeout, grace
        self._limit = timeout + grace
        self._step: str | None = None
        self._deadline = math.inf
        self._stopped = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._watch, name="check-watchdog", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        with self._cond:
            while not self._stopped:
                remaining = self._deadline - time.monotonic()
                if remaining <= 0:
                    print(
                        f"accelbackends: error: rank {self._rank}: {self._step} did not finish "
                        f"within {self._limit:g} s (--timeout {self._timeout:g} plus "
                        f"{self._grace:g} s); stopping this rank",
                        file=sys.stderr,
                        flush=True,
                    )
                    os._exit(1)
                self._cond.wait(None if remaining == math.inf else remaining)

    def _arm(self, step: str | None) -> None:
        with self._cond:
            self._step = step
            self._deadline = math.inf if step is None else time.monotonic() + self._limit
            self._cond.notify()

    def step(self, name: str) -> _Step:
        return _Step(self, name)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join()


class _Step:
    def __init__(self, watchdog: _Watchdog, name: str) -> None:
        self._watchdog, self._name = watchdog, name

    def __enter__(self) -> None:
        self._watchdog._arm(self._name)

    def __exit__(self, *exc: object) -> None:
        self._watchdog._arm(None)


def _max_over_ranks(ctx: Context, control: Any, values: Sequence[float]) -> list[float]:
    """The elementwise maximum of ``values`` over the ranks, through ``control``."""
    import torch
    import torch.distributed as dist

    tensor = torch.tensor(list(values), dtype=torch.float64)
    if control is None and ctx.device.type != "cpu":
        # The default group may reach only the device; not every device backend has float64.
        tensor = tensor.to(device=ctx.device, dtype=torch.float32)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=control)
    return [float(v) for v in tensor.cpu().tolist()]


# Outcomes of one call on one rank, ordered so that the maximum over the ranks is the worst.
_COMPLETED, _UNSUPPORTED_HERE, _RAISED = 0, 1, 2


def _agree(rank: _Rank, outcome: int, seconds: float, what: str) -> bool:
    """After each check or size: whether the backend under test may still be used (True) or
    not (False, and ``rank.stopped`` says why).

    A call that raised on *every* rank quickly (a dtype the backend rejects) leaves the ranks in
    step, so the run goes on; one that raised on some ranks only, or ran into the timeout,
    may not, and every rank stops using the backend under test at the same point.
    """
    with rank.watchdog.step(f"agreeing on the outcome of {what}"):
        try:
            worst, negated_best, slowest = _max_over_ranks(
                rank.ctx, rank.control, [outcome, -outcome, seconds]
            )
        except Exception as exc:
            _lost_contact(rank, f"agreeing on the outcome of {what}", exc)
    best = -negated_best
    if worst == _RAISED and best != _RAISED:
        rank.stopped = f"{what} raised on some ranks only (they may disagree on what comes next)"
    elif worst == _RAISED and slowest >= rank.options.timeout / 2:
        rank.stopped = f"{what} raised after {slowest:.0f} s (--timeout {rank.options.timeout:g})"
    return not rank.stopped


def _lost_contact(rank: _Rank, doing: str, exc: Exception) -> NoReturn:
    """The run's own traffic failed: another rank is gone or stuck. Wait a moment before
    failing, so that spawn() or the launcher sees that rank's end first and names it."""
    time.sleep(LOST_CONTACT_DELAY)
    after = f" after {rank.stopped}" if rank.stopped else ""
    raise AccelBackendsError(
        f"rank {rank.ctx.rank} lost contact with the other ranks while {doing}{after} "
        f"({_describe(exc)})"
    ) from exc


def _gather(rank: _Rank, local: list[_Result], what: str) -> list[_Result]:
    """Every rank's verdicts, merged: a check passed only where it passed on every rank."""
    import torch.distributed as dist

    gathered: list[Any] = [None] * rank.ctx.world_size
    with rank.watchdog.step(f"gathering the {what} results"):
        try:
            mine = [(r.name, r.status, r.detail) for r in local]
            dist.all_gather_object(gathered, mine, group=rank.control)
        except Exception as exc:
            _lost_contact(rank, f"gathering the {what} results", exc)
    names = list(dict.fromkeys(name for per_rank in gathered for name, _, _ in per_rank))
    return [
        _merge(
            name,
            {r: (s, d) for r, per_rank in enumerate(gathered) for n, s, d in per_rank if n == name},
        )
        for name in names
    ]


def _merge(name: str, by_rank: dict[int, tuple[str, str]]) -> _Result:
    failed = {r: d for r, (s, d) in sorted(by_rank.items()) if s == "failed"}
    not_run = {r: d for r, (s, d) in sorted(by_rank.items()) if s == "not run"}
    skipped = [r for r, (s, _) in sorted(by_rank.items()) if s == "skipped"]
    if failed:
        return _Result(name, "failed", _per_rank(failed), list(failed))
    if not_run:
        # Every rank stopped at the same point, for the reason they agreed on.
        return _Result(name, "not run", next(iter(not_run.values())), list(not_run))
    if skipped and len(skipped) < len(by_rank):
        detail = by_rank[skipped[0]][1]
        text = f"skipped on {_ranks(skipped)} ({detail}) but ran on the others"
        return _Result(name, "failed", text, skipped)
    if skipped:
        return _Result(name, "skipped", by_rank[skipped[0]][1])
    return _Result(name, "passed", next(iter(by_rank.values()))[1])


def _per_rank(details: dict[int, str]) -> str:
    """``rank 1: X`` or ``ranks 0, 1: X; rank 2: Y`` (identical details share one entry)."""
    grouped: dict[str, list[int]] = {}
    for rank, detail in details.items():
        grouped.setdefault(detail, []).append(rank)
    return "; ".join(f"{_ranks(ranks)}: {detail}" for detail, ranks in grouped.items())


def _ranks(ranks: Sequence[int]) -> str:
    return f"{_plural(len(ranks), 'rank')} {', '.join(map(str, ranks))}"


# -- correctness ---------------------------------------------------------------------------------


class _Verifier:
    """Collects the first wrong value of a check without leaving its loop: a rank that left a
    check early would skip collectives the other ranks still wait in."""

    def __init__(self) -> None:
        self.mismatch = ""

    def compare(self, got: Any, expected: Any, what: str, tolerance: Any = None) -> None:
        """Elementwise; ``tolerance`` (absolute, float64) applies to floating results only."""
        import torch

        if self.mismatch:
            return
        got = got.detach().cpu()
        if not got.is_floating_point():
            wrong = got != expected
        else:
            values = got.double()
            limit = tolerance if tolerance is not None else 0.0
            wrong = ((values - expected.double()).abs() > limit) | ~torch.isfinite(values)
        if bool(wrong.any()):
            index = int(wrong.nonzero()[0, 0])
            self.mismatch = (
                f"{what}, element {index}: got {_scalar(got[index])}, expected "
                f"{_scalar(expected[index])} ({int(wrong.sum())} of {got.numel()} wrong)"
            )

    def fail(self, message: str) -> None:
        self.mismatch = self.mismatch or message


def _scalar(value: Any) -> str:
    number = value.item()
    return f"{number:g}" if isinstance(number, float) else str(number)


#: A check's body: (ctx, dtype, verifier) -> a description of what passed, or "skipped: why".
_Body = Callable[["Context", str, _Verifier], str]


@dataclass(frozen=True)
class _Check:
    name: str
    row: str  # its row in the text grid
    dtype: str | None
    body: _Body


def _checks(world_size: int) -> list[_Check]:
    checks: list[_Check] = []
    for op in _REDUCTIONS:
        for dtype in DTYPES:
            if op == "avg" and dtype == "int64":
                continue  # the mean of integers is not an integer
            reduce = functools.partial(_all_reduce, op)
            checks.append(_Check(f"all_reduce {op} {dtype}", f"all_reduce {op}", dtype, reduce))
    per_dtype: list[tuple[str, str, _Body]] = [
        ("broadcast", f"broadcast from {world_size - 1}", _broadcast),
        ("all_gather", "all_gather", _all_gather),
        ("all_gather_into_tensor", "all_gather_into_tensor", _all_gather_into_tensor),
        ("reduce_scatter", "reduce_scatter sum", _reduce_scatter),
        ("all_to_all", "all_to_all", _all_to_all),
        ("send/recv ring", "send/recv ring", _send_recv_ring),
    ]
    for name, row, body in per_dtype:
        checks += [_Check(f"{name} {dtype}", row, dtype, body) for dtype in DTYPES]
    checks.append(_Check("all_gather_object", "all_gather_object", None, _all_gather_object))
    checks.append(_Check("barrier", "barrier", None, _barrier))
    return checks


def _correctness(rank: _Rank) -> list[_Result]:
    checks = _checks(rank.ctx.world_size)
    operations = len(dict.fromkeys(c.row for c in checks))
    rank.say(
        f"[3/4] correctness: {operations} operations on {', '.join(DTYPES)} at lengths "
        f"{', '.join(map(str, LENGTHS))} ({len(checks)} checks)"
    )
    merged = _gather(rank, [_run_check(rank, check) for check in checks], "correctness")
    for line in _grid(checks, merged, rank.ctx.world_size):
        rank.say("      " + line)
    return merged


def _run_check(rank: _Rank, check: _Check) -> _Result:
    if rank.stopped:
        return _Result(check.name, "not run", f"not run: {rank.stopped}")
    verifier = _Verifier()
    began = time.monotonic()
    with rank.watchdog.step(f"check {check.name!r}"):
        try:
            detail = check.body(rank.ctx, check.dtype or "", verifier)
            outcome = _COMPLETED
        except Exception as exc:
            detail = _describe(exc)
            outcome = _UNSUPPORTED_HERE if _is_unsupported(exc) else _RAISED
    _agree(rank, outcome, time.monotonic() - began, check.name)
    if outcome == _UNSUPPORTED_HERE:
        return _Result(check.name, "skipped", f"not supported by {rank.ctx.backend} ({detail})")
    if outcome == _RAISED:
        return _Result(check.name, "failed", f"raised {detail}")
    if verifier.mismatch:
        return _Result(check.name, "failed", verifier.mismatch)
    if detail.startswith("skipped: "):
        return _Result(check.name, "skipped", detail.removeprefix("skipped: "))
    return _Result(check.name, "passed", detail)


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _pattern(rank: int, n: int, dtype: str, salt: int) -> Any:
    """The input of ``rank`` as exact int64 values, computable by every rank.

    Integers in [-8, 8] are exact in bfloat16, and so are their sums up to 32 ranks; int64 adds
    multiples of 2**33, so that a backend that truncates to 32 bits is caught.
    """
    import torch

    i = torch.arange(n, dtype=torch.int64)
    small = (i * 7 + rank * 13 + salt * 5) % 17 - 8
    if dtype == "int64":
        return small + ((i * 3 + rank * 5 + salt) % 7 - 3) * 2**33
    return small


def _on_device(ctx: Context, values: Any, dtype: str) -> Any:
    return values.to(_torch_dtype(dtype)).to(ctx.device)


def _sentinel(ctx: Context, n: int, dtype: str) -> Any:
    import torch

    return torch.full((n,), _SENTINEL, dtype=_torch_dtype(dtype), device=ctx.device)


def _reduction_tolerance(dtype: str, inputs: Any, divisor: int = 1) -> Any:
    """(ranks + 1) x unit roundoff x sum of |inputs|, per element (None: exact)."""
    if dtype not in _ROUNDOFF:
        return None
    ranks = inputs.shape[0]
    return (ranks + 1) * _ROUNDOFF[dtype] * inputs.abs().sum(0).double() / divisor


def _tolerance_text(dtype: str) -> str:
    if dtype not in _ROUNDOFF:
        return "exact"
    return f"within (ranks+1) x 2^{int(math.log2(_ROUNDOFF[dtype]))} x sum(|x|)"


def _all_reduce(op: str, ctx: Context, dtype: str, verify: _Verifier) -> str:
    import torch
    import torch.distributed as dist

    salt = _REDUCTIONS.index(op)
    for n in LENGTHS:
        tensor = _on_device(ctx, _pattern(ctx.rank, n, dtype, salt), dtype)
        dist.all_reduce(tensor, op=getattr(dist.ReduceOp, op.upper()))
        inputs = torch.stack([_pattern(r, n, dtype, salt) for r in range(ctx.world_size)])
        if op == "max":
            verify.compare(tensor, inputs.amax(0), f"length {n}")
        elif op == "min":
            verify.compare(tensor, inputs.amin(0), f"length {n}")
        elif op == "sum":
            verify.compare(
                tensor, inputs.sum(0), f"length {n}", _reduction_tolerance(dtype, inputs)
            )
        else:
            expected = inputs.sum(0).double() / ctx.world_size
            tolerance = _reduction_tolerance(dtype, inputs, ctx.world_size)
            verify.compare(tensor, expected, f"length {n}", tolerance)
    return f"{_tolerance_text(dtype) if op in ('sum', 'avg') else 'exact'} at every length"


def _broadcast(ctx: Context, dtype: str, verify: _Verifier) -> str:
    import torch.distributed as dist

    root = ctx.world_size - 1  # not 0 where there are two ranks: a backend ignoring it is caught
    for n in LENGTHS:
        expected = _pattern(root, n, dtype, 4)
        tensor = _on_device(ctx, expected, dtype) if ctx.rank == root else _sentinel(ctx, n, dtype)
        dist.broadcast(tensor, src=root)
        verify.compare(tensor, expected, f"length {n}")
    return f"exact from rank {root} at every length"


def _all_gather(ctx: Context, dtype: str, verify: _Verifier) -> str:
    import torch.distributed as dist

    for n in LENGTHS:
        outputs = [_sentinel(ctx, n, dtype) for _ in range(ctx.world_size)]
        dist.all_gather(outputs, _on_device(ctx, _pattern(ctx.rank, n, dtype, 5), dtype))
        for source, output in enumerate(outputs):
            verify.compare(output, _pattern(source, n, dtype, 5), f"length {n} from rank {source}")
    return "exact at every length"


def _gather_single() -> Any:
    import torch.distributed as dist

    # torch 2.13 renamed all_gather_into_tensor to all_gather_single; the old name warns.
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _all_gather_into_tensor(ctx: Context, dtype: str, verify: _Verifier) -> str:
    import torch

    gather = _gather_single()
    for n in LENGTHS:
        output = _sentinel(ctx, n * ctx.world_size, dtype)
        gather(output, _on_device(ctx, _pattern(ctx.rank, n, dtype, 6), dtype))
        expected = torch.cat([_pattern(r, n, dtype, 6) for r in range(ctx.world_size)])
        verify.compare(output, expected, f"length {n} per rank")
    return "exact at every length"


def _reduce_scatter(ctx: Context, dtype: str, verify: _Verifier) -> str:
    import torch
    import torch.distributed as dist

    for n in LENGTHS:
        inputs = [
            _on_device(ctx, _pattern(ctx.rank, n, dtype, 10 + dest), dtype)
            for dest in range(ctx.world_size)
        ]
        output = _sentinel(ctx, n, dtype)
        dist.reduce_scatter(output, inputs)
        mine = torch.stack([_pattern(r, n, dtype, 10 + ctx.rank) for r in range(ctx.world_size)])
        verify.compare(output, mine.sum(0), f"length {n}", _reduction_tolerance(dtype, mine))
    return f"{_tolerance_text(dtype)} at every length"


def _all_to_all(ctx: Context, dtype: str, verify: _Verifier) -> str:
    import torch.distributed as dist

    for n in LENGTHS:
        inputs = [
            _on_device(ctx, _pattern(ctx.rank, n, dtype, 20 + dest), dtype)
            for dest in range(ctx.world_size)
        ]
        outputs = [_sentinel(ctx, n, dtype) for _ in range(ctx.world_size)]
        dist.all_to_all(outputs, inputs)
        for source, output in enumerate(outputs):
            expected = _pattern(source, n, dtype, 20 + ctx.rank)
            verify.compare(output, expected, f"length {n} from rank {source}")
    return "exact at every length"


def _send_recv_ring(ctx: Context, dtype: str, verify: _Verifier) -> str:
    import torch.distributed as dist

    if ctx.world_size == 1:
        return "skipped: a ring needs at least 2 ranks"
    after, before = (ctx.rank + 1) % ctx.world_size, (ctx.rank - 1) % ctx.world_size
    for n in LENGTHS:
        received = _sentinel(ctx, n, dtype)
        sending = dist.isend(_on_device(ctx, _pattern(ctx.rank, n, dtype, 30), dtype), after)
        receiving = dist.irecv(received, before)
        for work in (sending, receiving):
            if work is not None:
                work.wait()
        verify.compare(received, _pattern(before, n, dtype, 30), f"length {n} from rank {before}")
    return "exact at every length, each rank to the next"


def _object_for(rank: int) -> dict[str, Any]:
    return {"rank": rank, "text": "é∑" * (rank * 37 + 1), "values": [rank, rank / 3, None]}


def _all_gather_object(ctx: Context, dtype: str, verify: _Verifier) -> str:
    import torch.distributed as dist

    gathered: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, _object_for(ctx.rank))
    for source, value in enumerate(gathered):
        if value != _object_for(source):
            verify.fail(f"the object from rank {source} arrived as {value!r:.80}")
    return "equal objects from every rank"


def _barrier(ctx: Context, dtype: str, verify: _Verifier) -> str:
    import torch.distributed as dist

    dist.barrier()
    return "every rank passed it"


def _grid(checks: list[_Check], merged: list[_Result], world_size: int) -> Iterator[str]:
    """The correctness step as text: operations x dtypes, then whatever did not pass."""
    by_name = {r.name: r for r in merged}
    word = {"passed": "ok", "skipped": "skipped", "failed": "FAILED", "not run": "not run"}
    rows: list[list[str]] = [["operation", *DTYPES]]
    for row in dict.fromkeys(c.row for c in checks):
        cells = dict.fromkeys(DTYPES, "-")
        for check in (c for c in checks if c.row == row):
            state = word[by_name[check.name].status]
            if check.dtype is None:
                cells = {DTYPES[0]: state} | dict.fromkeys(DTYPES[1:], "")
            else:
                cells[check.dtype] = state
        rows.append([row, *cells.values()])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        yield "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
    yield (
        f"tolerance: float sums and averages {_tolerance_text('bfloat16')} for bfloat16, "
        f"2^-24 for float32; everything else exact ({world_size} "
        f"{_plural(world_size, 'rank')}); -: avg is not defined for integers"
    )
    rows_of = {c.name: c for c in checks}
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for result in merged:
        if result.status != "passed":
            check = rows_of[result.name]
            key = (result.status, check.row, result.detail)
            grouped.setdefault(key, []).append(check.dtype or "")
    not_run = [k for k in grouped if k[0] == "not run"]
    for status, row, detail in grouped:
        if status != "not run":
            dtypes = ", ".join(d for d in grouped[status, row, detail] if d)
            yield f"{word[status]} {row}{f' ({dtypes})' if dtypes else ''}: {detail}"
    if not_run:
        count = sum(len(grouped[k]) for k in not_run)
        why = not_run[0][2].removeprefix("not run: ")
        yield f"not run: {count} {_plural(count, 'check')}, because {why}"


# -- bandwidth -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """One size of one swept operation; ``seconds`` is the slowest rank's mean per call.

    ``nbytes`` follows nccl-tests: the buffer size for all_reduce, the *total output* size
    (each rank's input times the ranks) for all_gather.
    """

    op: str
    nbytes: int
    dtype: str
    iters: int
    seconds: float
    world_size: int

    @property
    def algbw(self) -> float:
        """Algorithm bandwidth, bytes per second: nbytes / seconds."""
        return self.nbytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def busbw(self) -> float:
        """Bus bandwidth, bytes per second, as nccl-tests defines it."""
        return bus_bandwidth(self.op, self.algbw, self.world_size)

    def row(self) -> tuple[str, ...]:
        """The cells of the text table, in the order of its columns."""
        return (
            self.op,
            format_size(self.nbytes),
            f"{self.seconds * 1e6:.1f}",
            f"{self.algbw / 1e9:.3f}",
            f"{self.busbw / 1e9:.3f}",
            str(self.iters),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "bytes": self.nbytes,
            "dtype": self.dtype,
            "iters": self.iters,
            "time_us": round(self.seconds * 1e6, 3),
            "algbw_gbps": round(self.algbw / 1e9, 6),
            "busbw_gbps": round(self.busbw / 1e9, 6),
        }


def bus_bandwidth(op: str, algbw: float, world_size: int) -> float:
    """nccl-tests' bus bandwidth: all_reduce algbw x 2(n-1)/n, all_gather algbw x (n-1)/n."""
    return algbw * OPS[op](world_size)


def synchronize(device: Any) -> None:
    """Wait until the device has run everything queued on it; nothing to wait for on the CPU."""
    if device.type == "cpu":
        return
    import torch

    sync = getattr(getattr(torch, device.type, None), "synchronize", None)
    if callable(sync):
        sync()
    else:
        torch.accelerator.synchronize()


def _timed_call(ctx: Context, op: str, nbytes: int, dtype: str) -> tuple[Callable[[], Any], int]:
    """The call to time, on buffers made here, and the bytes it counts (whole elements)."""
    import torch
    import torch.distributed as dist

    kind = _torch_dtype(dtype)
    size = torch.tensor([], dtype=kind).element_size()
    if op == "all_reduce":
        count = max(1, nbytes // size)
        # Zeros stay zeros when summed: no denormal or infinite values slow the arithmetic.
        buffer = torch.zeros(count, dtype=kind, device=ctx.device)
        return functools.partial(dist.all_reduce, buffer), count * size
    if op == "all_gather":
        count = max(1, nbytes // (size * ctx.world_size))
        source = torch.zeros(count, dtype=kind, device=ctx.device)
        output = torch.empty(count * ctx.world_size, dtype=kind, device=ctx.device)
        return functools.partial(_gather_single(), output, source), count * size * ctx.world_size
    raise ValueError(f"op={op!r} is not swept; use one of {', '.join(OPS)}")


def measure(
    ctx: Context,
    op: str,
    nbytes: int,
    *,
    iters: int | None = None,
    warmup: int = DEFAULT_WARMUP,
    dtype: str = "float32",
    control: Any = None,
) -> Measurement:
    """Time ``op`` on ``nbytes`` as ``check`` reports it. Collective: every rank calls it.

    Warm-up calls, a barrier, ``iters`` calls back to back, one device synchronisation; the
    result is the slowest rank's mean. With ``iters=None`` the count follows from the slowest
    rank's fastest warm-up call (so at least one warm-up call runs). ``control`` is the group
    that carries the timings (the default group when None).
    """
    import torch.distributed as dist

    call, counted = _timed_call(ctx, op, nbytes, dtype)
    fastest = math.inf
    for _ in range(warmup if iters is not None else max(1, warmup)):
        begin = time.perf_counter()
        call()
        synchronize(ctx.device)
        fastest = min(fastest, time.perf_counter() - begin)
    if iters is None:
        estimate = _max_over_ranks(ctx, control, [fastest])[0]
        wanted = round(AUTO_SECONDS_PER_SIZE / max(estimate, 1e-9))
        iters = min(AUTO_MAX_ITERS, max(AUTO_MIN_ITERS, wanted))
    dist.barrier()
    synchronize(ctx.device)
    begin = time.perf_counter()
    for _ in range(iters):
        call()
    synchronize(ctx.device)
    mean = (time.perf_counter() - begin) / iters
    slowest = _max_over_ranks(ctx, control, [mean])[0]
    return Measurement(op, counted, dtype, iters, slowest, ctx.world_size)


_TABLE = "{:<11} {:>9} {:>12} {:>13} {:>13} {:>6}"
_COLUMNS = ("op", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "iters")


def _bandwidth(rank: _Rank) -> tuple[list[Measurement], list[_Result]]:
    """The sweep, a table row printed as each size finishes. Returns the measurements and this
    rank's problems (an operation the backend does not support, one that raised)."""
    ctx, options = rank.ctx, rank.options
    sizes = options.sizes(ctx.device.type)
    iterations = (
        f"{options.iters} iterations"
        if options.iters
        else f"automatic iterations (about {AUTO_SECONDS_PER_SIZE:g} s per size)"
    )
    rank.say(
        f"[4/4] bandwidth: {' and '.join(OPS)} on float32 from {format_size(sizes[0])} to "
        f"{format_size(sizes[-1])}, {iterations} after {options.warmup} warm-up\n"
        "      time: the slowest rank's mean; algbw = size / time; busbw = algbw x 2(n-1)/n "
        "(all_reduce), x (n-1)/n (all_gather, size = total output); GB/s = 10^9 bytes/s"
    )
    if rank.stopped:
        rank.say(f"      not run: {rank.stopped}")
        return [], [_Result("bandwidth", "not run", f"not run: {rank.stopped}")]
    rank.say("      " + _TABLE.format(*_COLUMNS))
    measurements: list[Measurement] = []
    problems: list[_Result] = []
    for op in OPS:
        for nbytes in sizes:
            name = f"bandwidth {op} {format_size(nbytes)}"
            began = time.monotonic()
            with rank.watchdog.step(name):
                try:
                    m = measure(
                        ctx,
                        op,
                        nbytes,
                        iters=options.iters,
                        warmup=options.warmup,
                        control=rank.control,
                    )
                    outcome, detail = _COMPLETED, ""
                except Exception as exc:
                    detail = _describe(exc)
                    outcome = _UNSUPPORTED_HERE if _is_unsupported(exc) else _RAISED
            go_on = _agree(rank, outcome, time.monotonic() - began, name)
            if outcome == _UNSUPPORTED_HERE:
                detail = f"not supported by {ctx.backend} ({detail})"
                problems.append(_Result(f"bandwidth {op}", "skipped", detail))
                rank.say(f"      {op:<11} skipped: {detail}")
                break
            if outcome == _RAISED:
                problems.append(_Result(name, "failed", f"raised {detail}"))
                rank.say(f"      {op:<11} {format_size(nbytes):>9}  FAILED on rank {ctx.rank}")
            if not go_on:
                return measurements, problems
            if outcome == _COMPLETED:
                measurements.append(m)
                rank.say("      " + _TABLE.format(*m.row()))
    return measurements, problems


# -- the verdict and the plot --------------------------------------------------------------------


def _verdict(report: dict[str, Any]) -> str:
    checks = report["checks"]
    not_run = [c for c in checks if not c["ok"] and c["detail"].startswith("not run")]
    failed = [c for c in checks if not c["ok"] and c not in not_run]
    skipped = [c for c in checks if c["skipped"]]
    passed = len(checks) - len(failed) - len(not_run) - len(skipped)
    where = f"{report['accelerator']} with {report['backend']}, {report['world_size']} ranks"
    counts = f"{passed} passed, {len(failed)} failed, {len(skipped)} skipped"
    if not_run:
        counts += f", {len(not_run)} not run"
    if failed or not_run:
        shown = ", ".join(f"{c['name']} on {_ranks(c['ranks'])}" for c in failed[:4])
        more = f" and {len(failed) - 4} more" if len(failed) > 4 else ""
        return f"verdict: FAILED: {shown or 'checks not run'}{more} ({counts}; {where})"
    peak = max((b["busbw_gbps"] for b in report["bandwidth"]), default=None)
    best = "" if peak is None else f"; peak busbw {peak:.2f} GB/s"
    return f"verdict: PASSED ({counts}; {where}{best})"


def _plot(path: Path, report: dict[str, Any]) -> None:
    from matplotlib.figure import Figure  # type: ignore[import-not-found,unused-ignore]

    figure = Figure(figsize=(7, 4.5), layout="constrained")
    axes = figure.add_subplot()
    for op in OPS:
        rows = [b for b in report["bandwidth"] if b["op"] == op]
        if rows:
            axes.plot([b["bytes"] for b in rows], [b["busbw_gbps"] for b in rows], "o-", label=op)
    ticks = sorted({b["bytes"] for b in report["bandwidth"]})
    axes.set_xscale("log", base=2)
    axes.set_xticks(ticks, [format_size(t) for t in ticks], rotation=45, ha="right")
    axes.set_xlabel("size (all_gather: total output)")
    axes.set_ylabel("busbw (GB/s)")
    axes.set_title(
        f"accelbackends check: {report['accelerator']} with {report['backend']}, "
        f"{report['world_size']} ranks"
    )
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.savefig(path)
